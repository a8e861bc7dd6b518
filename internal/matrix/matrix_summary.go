package matrix

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/vigil-gw/vigil/internal/demo"
)

// matrixColumns are the matrix's signal columns, in order.
var matrixColumns = []demo.Signal{demo.SigDrift, demo.SigDecay, demo.SigOutput, demo.SigLatency, demo.SigPrecision, demo.SigEjection, demo.SigSlow, demo.SigStore, demo.SigSpans}

// columnNames are the columns' headings.
var columnNames = map[demo.Signal]string{
	demo.SigDrift: "input drift", demo.SigDecay: "confidence", demo.SigOutput: "output drift", demo.SigLatency: "latency",
	demo.SigPrecision: "precision", demo.SigEjection: "backend out", demo.SigSlow: "backend slow", demo.SigStore: "store down", demo.SigSpans: "spans dropped",
}

// expectsSignal reports whether r's diagonal holds k.
func (r *matrixRow) expectsSignal(k demo.Signal) bool {
	return slices.ContainsFunc(r.expect, func(e demo.Expectation) bool { return e.Signal == k })
}

// expectsAlert reports whether name is one of r's diagonal alerts, for
// any model.
func (r *matrixRow) expectsAlert(name string) bool {
	return slices.ContainsFunc(r.expect, func(e demo.Expectation) bool { return slices.Contains(e.Alerts, name) })
}

// diagonal reports whether fa is one of r's diagonal alerts: one of an
// expectation's names, with its model's label when it names a model.
func (r *matrixRow) diagonal(fa demo.FiredAlert) bool {
	return slices.ContainsFunc(r.expect, func(e demo.Expectation) bool { return e.Matches(fa) })
}

// failures lists what rr got wrong: a diagonal signal or alert missing or
// late, a signal or alert off the diagonal that is not an allowed
// consequence. A skipped row has none.
func (rr *rowResult) failures() []string {
	if rr.skipped != "" {
		return nil
	}
	r, pr := rr.row, &rr.phase
	var out []string
	if rr.err != nil {
		out = append(out, rr.err.Error())
	}
	for _, e := range r.expect {
		name := e.Signal.Name()
		if e.Model != "" {
			name = "model " + e.Model + "'s " + name
		}
		switch d := pr.SeenFor(e); {
		case d < 0:
			out = append(out, fmt.Sprintf("%s did not leave ok", name))
		case d > r.deadline:
			out = append(out, fmt.Sprintf("%s after %s, past its deadline %s", name, demo.FormatSeconds(d), demo.FormatDuration(r.deadline)))
		}
		// A fault confined to one model moves no other model's segment.
		for _, m := range pr.OthersSeen(e) {
			out = append(out, fmt.Sprintf("off the diagonal: model %s's %s %s after %s", m, e.Signal.Name(),
				e.Signal.Alarm(), demo.FormatSeconds(pr.SegSeen[demo.SegKey{Model: m, Signal: e.Signal}])))
		}
		if len(e.Alerts) == 0 {
			continue
		}
		want := strings.Join(e.Alerts, " or ")
		if e.Model != "" {
			want += " with model=" + e.Model
		}
		switch fa := pr.FirstAlert(e); {
		case fa == nil:
			out = append(out, fmt.Sprintf("no %s fired", want))
		case fa.After > r.alertDeadline:
			out = append(out, fmt.Sprintf("%s after %s, past its deadline %s", fa.Name, demo.FormatSeconds(fa.After), demo.FormatDuration(r.alertDeadline)))
		}
	}
	for _, k := range matrixColumns {
		if pr.Seen[k] >= 0 && !r.expectsSignal(k) && !slices.Contains(r.allowed, k) {
			out = append(out, fmt.Sprintf("off the diagonal: %s %s after %s", k.Name(), k.Alarm(), demo.FormatSeconds(pr.Seen[k])))
		}
	}
	for _, fa := range pr.Alerts {
		if !r.diagonal(fa) && !slices.Contains(r.allowedAlerts, fa.Name) {
			out = append(out, fmt.Sprintf("off the diagonal: alert %s after %s", fa.String(), demo.FormatSeconds(fa.After)))
		}
	}
	return out
}

// matrixFailures lists every failure of every seed's rows, each line
// naming its seed and row.
func matrixFailures(results []*matrixResult) []string {
	var out []string
	for _, res := range results {
		if res.pinErr != nil {
			out = append(out, fmt.Sprintf("seed %d: baseline not pinned: %v", res.seed, res.pinErr))
		}
		for i := range res.rows {
			for _, f := range res.rows[i].failures() {
				out = append(out, fmt.Sprintf("seed %d, %s: %s", res.seed, res.rows[i].row.name, f))
			}
		}
	}
	return out
}

// printMatrix writes the matrix as markdown: a row per fault, a column per
// signal (the time it left ok with each seed; bold on the diagonal,
// "allowed" for a documented consequence, ✗ for anything else), the
// alerts that fired, the client errors, and a verdict; then the notes.
func printMatrix(out io.Writer, rows []matrixRow, results []*matrixResult) {
	seeds := make([]string, len(results))
	for i, r := range results {
		seeds[i] = fmt.Sprint(r.seed)
	}
	fmt.Fprintf(out, "Times are seconds from the injection, one per seed (%s); – : stayed ok / did not fire.\n\n", strings.Join(seeds, ", "))
	fmt.Fprint(out, "| fault |")
	for _, k := range matrixColumns {
		fmt.Fprintf(out, " %s |", columnNames[k])
	}
	fmt.Fprintln(out, " alerts fired | client errors | verdict |")
	fmt.Fprint(out, "|---|")
	for range matrixColumns {
		fmt.Fprint(out, "---|")
	}
	fmt.Fprintln(out, "---|---|---|")
	var notes []string
	for i := range rows {
		r := &rows[i]
		byseed := make([]*rowResult, len(results))
		skipped := ""
		for j, res := range results {
			for k := range res.rows {
				if res.rows[k].row.name == r.name {
					byseed[j] = &res.rows[k]
					if res.rows[k].skipped != "" {
						skipped = res.rows[k].skipped
					}
				}
			}
		}
		deadline := ""
		switch {
		case len(r.expect) > 0:
			deadline = fmt.Sprintf(" (≤ %s)", demo.FormatDuration(r.deadline))
		case r.calm != "":
			deadline = fmt.Sprintf(" (watched %s)", demo.FormatDuration(r.deadline))
		}
		fmt.Fprintf(out, "| %s%s |", r.name, deadline)
		if skipped != "" {
			for range matrixColumns {
				fmt.Fprint(out, " |")
			}
			fmt.Fprintf(out, " | | skipped: %s |\n", skipped)
			continue
		}
		for _, k := range matrixColumns {
			fmt.Fprintf(out, " %s |", signalCell(r, k, byseed))
		}
		fmt.Fprintf(out, " %s |", alertsCell(r, byseed))
		var sent, failed int64
		var fails []string
		for _, rr := range byseed {
			if rr == nil {
				continue
			}
			sent, failed = sent+rr.sent, failed+rr.errors
			fails = append(fails, rr.failures()...)
			if rr.note != "" {
				notes = append(notes, fmt.Sprintf("%s, seed %d: %s", r.name, rr.seed, rr.note))
			}
			if len(rr.dirty) > 0 {
				notes = append(notes, fmt.Sprintf("%s, seed %d: began before everything was back to ok: %s", r.name, rr.seed, strings.Join(rr.dirty, ", ")))
			}
		}
		verdict := "pass"
		if len(fails) > 0 {
			verdict = fmt.Sprintf("**FAIL** (%d)", len(fails))
		}
		fmt.Fprintf(out, " %d of %d | %s |\n", failed, sent, verdict)
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Bold: the diagonal (the fault's own signal); (…) allowed: a documented consequence; ✗: off the diagonal and not allowed.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Allowed consequences, gaps and calm rows:")
	for i := range rows {
		r := &rows[i]
		if r.why != "" {
			fmt.Fprintf(out, "- %s: may also move %s: %s.\n", r.name, allowedNames(r), r.why)
		}
		if r.gap != "" {
			fmt.Fprintf(out, "- %s: gap: %s.\n", r.name, r.gap)
		}
		if r.calm != "" {
			fmt.Fprintf(out, "- %s: nothing else may move: %s.\n", r.name, r.calm)
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(out, "Notes:")
		for _, n := range notes {
			fmt.Fprintln(out, "- "+n)
		}
	}
	if f := matrixFailures(results); len(f) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(out, "Failures:")
		for _, x := range f {
			fmt.Fprintln(out, "- "+x)
		}
	}
}

// allowedNames lists r's allowed signals and alerts.
func allowedNames(r *matrixRow) string {
	var xs []string
	for _, k := range r.allowed {
		xs = append(xs, k.Name())
	}
	if len(r.allowedAlerts) > 0 {
		xs = append(xs, "alerts "+strings.Join(r.allowedAlerts, ", "))
	}
	return strings.Join(xs, "; ")
}

// signalCell is one row's times for signal k, one per seed.
func signalCell(r *matrixRow, k demo.Signal, byseed []*rowResult) string {
	var ts []string
	moved := false
	for _, rr := range byseed {
		if rr == nil || rr.skipped != "" {
			ts = append(ts, "?")
			continue
		}
		d := rr.phase.Seen[k]
		for _, e := range r.expect {
			if e.Signal == k && e.Model != "" {
				d = rr.phase.SeenFor(e) // the model's own segment
			}
		}
		if d < 0 {
			ts = append(ts, "–")
			continue
		}
		moved = true
		ts = append(ts, fmt.Sprintf("%.1f", d.Seconds()))
	}
	cell := strings.Join(ts, " / ")
	switch {
	case r.expectsSignal(k):
		return "**" + cell + "**"
	case !moved:
		return "–"
	case slices.Contains(r.allowed, k):
		return "(" + cell + ") allowed"
	}
	return "✗ " + cell
}

// alertsCell lists the alerts that fired in the row, each with its times
// per seed.
func alertsCell(r *matrixRow, byseed []*rowResult) string {
	var names []string
	diagonal := map[string]bool{} // by name and labels
	for _, rr := range byseed {
		if rr == nil {
			continue
		}
		for _, fa := range rr.phase.Alerts {
			n := fa.String()
			if !slices.Contains(names, n) {
				names = append(names, n)
				diagonal[n] = r.diagonal(fa)
			}
		}
	}
	if len(names) == 0 {
		return "–"
	}
	var parts []string
	for _, n := range names {
		var ts []string
		name := n
		for _, rr := range byseed {
			t := "–"
			if rr != nil {
				for _, fa := range rr.phase.Alerts {
					if fa.String() == n {
						t = fmt.Sprintf("%.1f", fa.After.Seconds())
						if fa.Silenced {
							t += " (silenced)"
						}
						name = fa.Name
						break
					}
				}
			}
			ts = append(ts, t)
		}
		mark := ""
		switch {
		case diagonal[n]:
			n = "**" + n + "**"
		case slices.Contains(r.allowedAlerts, name):
			mark = " allowed"
		default:
			mark = " ✗"
		}
		parts = append(parts, fmt.Sprintf("%s %s%s", n, strings.Join(ts, " / "), mark))
	}
	return strings.Join(parts, "; ")
}
