package matrix

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/internal/demo"
	"github.com/vigil-gw/vigil/internal/testutil"
)

// TestMatrixRows: the row table is well formed. Every row restores what
// it injects (checked on a demo that is not served: each inject leaves
// some knob, a mix or a relay changed and its restore brings all of
// them back); every row has a diagonal with deadlines, a written gap, or
// says why nothing but its allowed consequences may move (calm);
// no allowed consequence is on its own diagonal; every allowed
// consequence says why.
func TestMatrixRows(t *testing.T) {
	for _, scale := range []float64{0.5, 1} {
		ms := newMatrixScale(scale)
		rows := withDeadlines(matrixRows(ms), ms)
		if len(rows) != 13 {
			t.Errorf("scale %v: %d rows, want the 13 faults", scale, len(rows))
		}
		names := map[string]bool{}
		for _, r := range rows {
			if names[r.name] {
				t.Errorf("row %q twice", r.name)
			}
			names[r.name] = true
			if r.inject == nil || r.restore == nil {
				t.Errorf("%s: inject and restore are both needed", r.name)
			}
			if len(r.expect) == 0 && r.gap == "" && r.calm == "" {
				t.Errorf("%s: no diagonal and no gap or calm written down", r.name)
			}
			if len(r.expect) > 0 && r.calm != "" {
				t.Errorf("%s: a diagonal and calm", r.name)
			}
			if len(r.expect) > 0 && (r.deadline <= 0 || r.alertDeadline < r.deadline || r.deadline > ms.window) {
				t.Errorf("%s: deadlines %v / %v, want 0 < signal ≤ alert and signal within the window %v", r.name, r.deadline, r.alertDeadline, ms.window)
			}
			for _, k := range r.allowed {
				if r.expectsSignal(k) {
					t.Errorf("%s: %s is both expected and allowed", r.name, k.Name())
				}
			}
			for _, a := range r.allowedAlerts {
				if r.expectsAlert(a) {
					t.Errorf("%s: alert %s is both expected and allowed", r.name, a)
				}
			}
			if (len(r.allowed) > 0 || len(r.allowedAlerts) > 0) && r.why == "" {
				t.Errorf("%s: allowed consequences without a reason", r.name)
			}
			for _, e := range r.expect {
				if !slices.Contains(matrixColumns, e.Signal) {
					t.Errorf("%s: expects %s, which is no column", r.name, e.Signal.Name())
				}
			}
		}
	}

	// Inject then restore on an unserved demo with relays: everything
	// back as it was.
	d, err := demo.New(demo.Setup{Listen: "127.0.0.1:0", RPS: 1, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	store, err := newRelay("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	coll, err := newRelay("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	tg := &target{Demo: d, infra: &infra{store: store, collector: coll}}
	type snapshot struct {
		knobs     []string
		mix       *demo.PromptMix
		models    *demo.ModelMix
		cut, cutC bool
	}
	snap := func() snapshot {
		var s snapshot
		for _, name := range demo.AllSims {
			b, _ := d.Knobs(name).MarshalJSON()
			s.knobs = append(s.knobs, string(b))
		}
		s.mix, s.models = d.Mixes()
		s.cut, s.cutC = store.IsCut(), coll.IsCut()
		return s
	}
	same := func(a, b snapshot) bool {
		return slices.Equal(a.knobs, b.knobs) && a.mix == b.mix && a.models == b.models && a.cut == b.cut && a.cutC == b.cutC
	}
	before := snap()
	ms := newMatrixScale(0.5)
	for _, r := range matrixRows(ms) {
		if err := r.inject(tg); err != nil {
			t.Fatalf("%s: inject: %v", r.name, err)
		}
		if same(snap(), before) {
			t.Errorf("%s: inject changed nothing", r.name)
		}
		if err := r.restore(tg); err != nil {
			t.Fatalf("%s: restore: %v", r.name, err)
		}
		if after := snap(); !same(after, before) {
			t.Errorf("%s: restore left %+v, want %+v", r.name, after, before)
		}
	}
}

// TestMatrixVerdict: a row's failures are a missing or late diagonal and
// anything off it that is not allowed; an allowed consequence is none.
func TestMatrixVerdict(t *testing.T) {
	row := &matrixRow{name: "confidence drop", expect: []demo.Expectation{{Signal: demo.SigDecay, Alerts: []string{"VigilConfidenceDecay"}}},
		deadline: 10 * time.Second, alertDeadline: 20 * time.Second,
		allowed: []demo.Signal{demo.SigOutput}, allowedAlerts: []string{"VigilOutputDrift"}, why: "perplexity"}
	mk := func(f func(*demo.PhaseResult)) *rowResult {
		rr := &rowResult{row: row, seed: 1, phase: demo.NewPhaseResult(row.expect)}
		f(&rr.phase)
		return rr
	}
	for _, c := range []struct {
		name string
		f    func(*demo.PhaseResult)
		want int
	}{
		{"diagonal and an allowed consequence", func(p *demo.PhaseResult) {
			p.Seen[demo.SigDecay], p.Seen[demo.SigOutput] = 3*time.Second, 5*time.Second
			p.Alerts = []demo.FiredAlert{{Name: "VigilConfidenceDecay", After: 6 * time.Second}, {Name: "VigilOutputDrift", After: 9 * time.Second}}
		}, 0},
		{"nothing moved", func(p *demo.PhaseResult) {}, 2},
		{"late signal, late alert", func(p *demo.PhaseResult) {
			p.Seen[demo.SigDecay] = 11 * time.Second
			p.Alerts = []demo.FiredAlert{{Name: "VigilConfidenceDecay", After: 21 * time.Second}}
		}, 2},
		{"off the diagonal", func(p *demo.PhaseResult) {
			p.Seen[demo.SigDecay], p.Seen[demo.SigLatency] = 3*time.Second, 4*time.Second
			p.Alerts = []demo.FiredAlert{{Name: "VigilConfidenceDecay", After: 6 * time.Second}, {Name: "VigilLatencyE2E", After: 8 * time.Second}}
		}, 2},
	} {
		if got := mk(c.f).failures(); len(got) != c.want {
			t.Errorf("%s: failures %q, want %d", c.name, got, c.want)
		}
	}
	if got := (&rowResult{row: row, skipped: "no redis-server"}).failures(); len(got) != 0 {
		t.Errorf("a skipped row fails: %q", got)
	}

	// A fault confined to one model: its segment and its alert with its
	// model label; another model's segment or alert is off the diagonal.
	one := &matrixRow{name: "least-used model decay", expect: []demo.Expectation{{Signal: demo.SigDecay, Alerts: []string{"VigilConfidenceDecay"}, Model: demo.SmallModel}},
		deadline: 10 * time.Second, alertDeadline: 20 * time.Second}
	const otherModel = "demo-model" // any model but demo-small
	small := map[string]string{"model": demo.SmallModel}
	other := map[string]string{"model": otherModel}
	for _, c := range []struct {
		name string
		f    func(*demo.PhaseResult)
		want int
	}{
		{"the model's segment and its alert", func(p *demo.PhaseResult) {
			p.Seen[demo.SigDecay], p.SegSeen[demo.SegKey{Model: demo.SmallModel, Signal: demo.SigDecay}] = 3*time.Second, 3*time.Second
			p.Alerts = []demo.FiredAlert{{Name: "VigilConfidenceDecay", Labels: small, After: 6 * time.Second}}
		}, 0},
		{"another model's segment and alert only", func(p *demo.PhaseResult) {
			p.Seen[demo.SigDecay], p.SegSeen[demo.SegKey{Model: otherModel, Signal: demo.SigDecay}] = 3*time.Second, 3*time.Second
			p.Alerts = []demo.FiredAlert{{Name: "VigilConfidenceDecay", Labels: other, After: 6 * time.Second}}
		}, 4}, // its segment and alert missing; the other's both off the diagonal
		{"the alert without the model label", func(p *demo.PhaseResult) {
			p.Seen[demo.SigDecay], p.SegSeen[demo.SegKey{Model: demo.SmallModel, Signal: demo.SigDecay}] = 3*time.Second, 3*time.Second
			p.Alerts = []demo.FiredAlert{{Name: "VigilConfidenceDecay", After: 6 * time.Second}}
		}, 2},
	} {
		rr := &rowResult{row: one, seed: 1, phase: demo.NewPhaseResult(one.expect)}
		c.f(&rr.phase)
		if got := rr.failures(); len(got) != c.want {
			t.Errorf("%s: failures %q, want %d", c.name, got, c.want)
		}
	}
}

// TestMatrix runs the fault-isolation matrix at half scale with the three
// seeds concurrently and asserts it: every fault's own signal (and its
// alert) within its deadline, nothing else but its documented
// consequences, and no client error outside the rows whose faults are
// errors. About 6 minutes on two cores; -short skips it.
func TestMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("the matrix takes minutes")
	}
	testutil.SkipStatisticalUnderRace(t)
	ms := newMatrixScale(0.5)
	rows := withDeadlines(matrixRows(ms), ms)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	var out bytes.Buffer
	results, err := runSeeds(ctx, ms, rows, Seeds, &out, slog.New(slog.DiscardHandler))
	var table bytes.Buffer
	printMatrix(&table, rows, results)
	t.Log("\n" + out.String() + "\n" + table.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(Seeds) {
		t.Fatalf("%d seeds finished, want %d", len(results), len(Seeds))
	}
	for _, f := range matrixFailures(results) {
		t.Error(f)
	}
	for _, res := range results {
		for _, rr := range res.rows {
			if rr.skipped != "" {
				t.Logf("seed %d: %s skipped: %s", res.seed, rr.row.name, rr.skipped)
				continue
			}
			inherent := strings.Contains(rr.row.name, "500") || strings.Contains(rr.row.name, "hang")
			if rr.errors > 0 && !inherent {
				t.Errorf("seed %d, %s: %d client errors of %d requests", res.seed, rr.row.name, rr.errors, rr.sent)
			}
		}
	}
}
