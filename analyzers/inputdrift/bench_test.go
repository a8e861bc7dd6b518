package inputdrift

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/inputdrift/content"
	"github.com/vigil-gw/vigil/config"
)

// BenchmarkExtractLong shows that extraction allocates per message, not per
// character: a prompt 16 times longer costs the same allocations.
func BenchmarkExtractLong(b *testing.B) {
	for _, words := range []int{50, 800} {
		body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("naïve résumé 数据 ", words/3) + `"}],"max_tokens":256}`)
		b.Run(map[int]string{50: "50words", 800: "800words"}[words], func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := Extract(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkExtractText is a 1,000-character English prompt's features
// and content (ExtractText) against its features alone (ExtractAPI): the
// content test's cost per prompt, and no allocation for it.
func BenchmarkExtractText(b *testing.B) {
	text := strings.Repeat("The quick brown fox jumps over the lazy dog near the riverbank at dawn. ", 14)[:1000]
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + text + `"}],"max_tokens":256}`)
	var r content.Reader
	var d content.Doc
	for _, withText := range []bool{false, true} {
		b.Run(map[bool]string{false: "features", true: "features+content"}[withText], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if withText {
					_, err = ExtractText(Chat, body, &r, &d, false)
				} else {
					_, err = ExtractAPI(Chat, body)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEvaluate is one drift evaluation with n-prompt samples on both
// sides (reservoir = min_requests = n): every KS, PSI and chi-square test,
// and the joint Mahalanobis test with its FastMCD fit (refitted every time,
// as when the rolling reference moves). n = 1024 is the default
// configuration; n = 10000 the 10k-sample windows the drift targets are stated for.
func BenchmarkEvaluate(b *testing.B) {
	for _, n := range []int{1024, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			cfg := config.Default().Analyzers
			cfg.Drift.Reservoir, cfg.MinRequests, cfg.Window = n, n, time.Hour
			m, err := New(cfg, 1)
			if err != nil {
				b.Fatal(err)
			}
			g := newGen(1, 60, 15, map[string]float64{"en": 0.9, "es": 0.1})
			now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
			step := time.Hour / time.Duration(n) // reference: the first hour; current: the second
			for range 2 * n {
				f, err := Extract(g.body())
				if err != nil {
					b.Fatal(err)
				}
				m.Add(now, &f)
				now = now.Add(step)
			}
			if r := m.Evaluate(now); r.Current < int64(n) || r.Baseline < int64(n) {
				b.Fatalf("windows hold %d and %d prompts", r.Current, r.Baseline)
			}
			b.ReportAllocs()
			for b.Loop() {
				m.fitMu.Lock()
				m.fit = nil // refit, the costlier case
				m.fitMu.Unlock()
				m.Evaluate(now)
			}
		})
	}
}
