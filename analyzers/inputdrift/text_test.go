package inputdrift

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/inputdrift/content"
	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
)

// topics makes chat requests on texts of some subjects, each in one of
// four templates. Matched to another pool, each text is drawn as one of
// that pool's of the nearest length: a change of subject whose lengths
// (and script, all English) are the same.
type topics struct {
	rng   *rand.Rand
	texts []string
	like  []string // when set, lengths are drawn from these
}

var templates = []string{"Explain: %s", "Summarize in one line: %s", "What does this mean? %s", "Rewrite this more formally: %s"}

func (g *topics) body() []byte {
	text := g.texts[g.rng.IntN(len(g.texts))]
	if g.like != nil {
		n := len(g.like[g.rng.IntN(len(g.like))])
		i, _ := slices.BinarySearchFunc(g.texts, n, func(s string, n int) int { return len(s) - n })
		i = min(max(i-2+g.rng.IntN(5), 0), len(g.texts)-1)
		text = g.texts[i]
	}
	p, _ := json.Marshal(fmt.Sprintf(templates[g.rng.IntN(len(templates))], text))
	return fmt.Appendf(nil, `{"model":"m","messages":[{"role":"user","content":%s}],"max_tokens":256}`, p)
}

// feed sends n prompts of g at rate per second from start, evaluating
// every interval, and returns the time after the last prompt and the
// evaluations (counted from the first of this run) at which the state was
// drift.
func feed(t *testing.T, m *Monitor, g *topics, start time.Time, n int, rate float64, every time.Duration) (time.Time, []int) {
	t.Helper()
	var r content.Reader
	var d content.Doc
	step := time.Duration(float64(time.Second) / rate)
	now, next := start, start.Add(every)
	var drift []int
	evals := 0
	for range n {
		f, err := ExtractText(Chat, g.body(), &r, &d, false)
		if err != nil {
			t.Fatal(err)
		}
		m.Add(now, &f)
		now = now.Add(step)
		if !now.Before(next) {
			evals++
			if m.Evaluate(now).State == StateDrift {
				drift = append(drift, evals)
			}
			next = next.Add(every)
		}
	}
	return now, drift
}

// TestContentShift: against a pinned reference of two subjects, more of
// the same raises no drift; a change to two other subjects, at the same
// lengths and script, is input drift within a few evaluations, named
// "content", with the content test; and goes unseen without it, which is
// why the test exists.
func TestContentShift(t *testing.T) {
	testutil.SkipStatisticalUnderRace(t)
	ref := testutil.Fortunes(t, "politics", "work")
	other := testutil.Fortunes(t, "people", "kids")
	slices.SortFunc(other, func(a, b string) int { return len(a) - len(b) })
	const rate = 10.0
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("content test %v", on), func(t *testing.T) {
			cfg := config.Default().Analyzers
			cfg.Drift.Text.Enabled = on
			m, err := New(cfg, 5)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(9, 9))
			start := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
			now, _ := feed(t, m, &topics{rng: rng, texts: ref}, start, int(5*time.Minute.Seconds()*rate), rate, cfg.Interval)
			if err := m.Pin(now); err != nil {
				t.Fatal(err)
			}
			now, drift := feed(t, m, &topics{rng: rng, texts: ref}, now, int(10*time.Minute.Seconds()*rate), rate, cfg.Interval)
			if len(drift) > 0 {
				t.Errorf("the same subjects: drift at evaluations %v of 40; last %+v", drift, m.Last().Features)
			}
			// The content window fills with the new subjects in
			// 1,024 prompts (102 s): 7 evaluations, then 2 in a row.
			_, drift = feed(t, m, &topics{rng: rng, texts: other, like: ref}, now, int(5*time.Minute.Seconds()*rate), rate, cfg.Interval)
			last := m.Last()
			var why []string
			for _, f := range last.Features {
				if f.Drift {
					why = append(why, f.Name)
				}
			}
			t.Logf("other subjects: drift at evaluations %v of 20; drifted %v; content %+v", drift, why, last.Content)
			switch {
			case on && (len(drift) == 0 || drift[0] > 10):
				t.Errorf("other subjects: drift at evaluations %v, want from the 10th at the latest", drift)
			case on && !slices.Equal(why, []string{ContentFeature}):
				t.Errorf("drifted %v, want the content alone", why)
			case !on && len(drift) > 0:
				t.Errorf("without the content test, drift at evaluations %v (drifted %v): the shift is not one of shape alone", drift, why)
			}
			if on && (last.Content == nil || len(last.Content.Rose) == 0 || !strings.HasPrefix(last.Content.Rose[0].Term, "#")) {
				t.Errorf("content detail %+v: want risen terms as hashed ids (explain is off)", last.Content)
			}
		})
	}
}

// TestContentExplain: the terms that rose and fell are words only with
// analyzers.drift.text.explain; without it they are hashed ids, and no
// prompt text is in what the windows share with other replicas.
func TestContentExplain(t *testing.T) {
	for _, explain := range []bool{false, true} {
		cfg := config.Default().Analyzers
		cfg.MinRequests = 50
		cfg.Drift.Reservoir = 100
		cfg.Drift.Text.Explain = explain
		m, err := New(cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		var r content.Reader
		var d content.Doc
		start := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
		add := func(at time.Time, word string, i int) {
			body := fmt.Appendf(nil, `{"messages":[{"role":"user","content":"tell me about %s number %d please"}]}`, word, i%7)
			f, err := ExtractText(Chat, body, &r, &d, explain)
			if err != nil {
				t.Fatal(err)
			}
			m.Add(at, &f)
		}
		for i := range 300 {
			add(start.Add(time.Duration(i)*time.Second), "apples", i)
		}
		if err := m.Pin(start.Add(300 * time.Second)); err != nil {
			t.Fatal(err)
		}
		for i := range 300 {
			add(start.Add(time.Duration(300+i)*time.Second), "bananas", i)
		}
		res := m.Evaluate(start.Add(600 * time.Second))
		c := res.Content
		if c == nil || len(c.Rose) == 0 || len(c.Fell) == 0 {
			t.Fatalf("explain %v: content %+v", explain, c)
		}
		rose, fell := c.Rose[0].Term, c.Fell[0].Term
		if explain && (rose != "bananas" || fell != "apples") {
			t.Errorf("explain on: rose %q, fell %q; want bananas and apples", rose, fell)
		}
		if !explain && (!strings.HasPrefix(rose, "#") || !strings.HasPrefix(fell, "#")) {
			t.Errorf("explain off: rose %q, fell %q; want hashed ids", rose, fell)
		}
		var shared []byte
		m.Shared(func(name string, s window.Sharer) {
			enc, err := s.Export()
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range enc {
				shared = append(shared, e.Payload...)
			}
		})
		if got := strings.Contains(string(shared), "bananas"); got != explain {
			t.Errorf("explain %v: the shared windows hold the word: %v", explain, got)
		}
	}
}
