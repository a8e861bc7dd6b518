package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/precision"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// TestPrecisionEndToEnd: three simulators with the same seed stand for a
// full-precision model (fp16), an exact copy of it (copy) and a noisy
// quantization of it (int8); copy and int8 name fp16 as their reference.
// Clients' requests go through the gateway; shadow comparisons find copy
// identical and int8 divergent, in /admin/signals and /metrics, and the
// precision alert carries int8's backend, model and tier severity.
func TestPrecisionEndToEnd(t *testing.T) {
	cfg := testConfig(simBackend(t, nil))
	cfg.Backends[0].Name = "fp16"
	cfg.Backends = append(cfg.Backends,
		config.Backend{Name: "copy", URL: simBackend(t, nil), Kind: "openai", Weight: 100, Reference: "fp16", Models: []string{"m"}},
		config.Backend{Name: "int8", URL: simBackend(t, func(k *sim.Knobs) { k.Noise = 1 }), Kind: "openai", Weight: 100,
			Reference: "fp16", Models: []string{"m"}, Tier: "gold"})
	// About 20 requests per backend, whatever their latencies: the dynamic
	// strategy would send most of a sequential burst to whichever backend
	// answered fastest so far.
	cfg.Balancer.Strategy = config.StrategyRoundRobin
	cfg.Alerts.Tiers = map[string]string{"gold": "critical"}
	cfg.Alerts.Fixed = map[string]float64{alert.RulePrecision: 0.05}
	cfg.Alerts.Consecutive = 1
	pc := &cfg.Analyzers.Precision
	// Every request compared, none skipped however slow the machine.
	pc.SampleRatio, pc.MinTokens, pc.MaxTokens, pc.Concurrency = 1, 60, 16, 100
	cfg.Analyzers.Consecutive = 1
	a, gwURL := startApp(t, cfg)

	for i := range 60 { // about 20 per backend: 60 tokens need 4
		body := fmt.Sprintf(`{"model":"m","max_tokens":8,"stream":%v,"messages":[{"role":"user","content":"question %d"}]}`, i%2 == 0, i)
		resp, err := http.Post(gwURL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.Contains(string(b), `"top_logprobs"`) {
			t.Fatalf("client got %d %s: the shadow must not touch the client's exchange", resp.StatusCode, b)
		}
	}
	testutil.WaitFor(t, "both pairs to be judged", func() bool {
		p := precisionPairs(a)
		return p["copy"].State != precision.StateUnknown && p["int8"].State != precision.StateUnknown
	})
	p := precisionPairs(a)
	for _, name := range []string{"copy", "int8"} {
		// The simulator tokenizes and scores prompts as vLLM does.
		if m := p[name].Method; m != precision.MethodTeacherForced {
			t.Errorf("%s: method %q, want teacher_forced", name, m)
		}
	}
	if c := p["copy"]; c.State != precision.StateOK || c.KL != 0 || c.KLLowerBound != 0 || c.Top1Agreement != 1 || c.SplitShare != 0 || c.Reference != "fp16" {
		t.Errorf("copy: %+v, want identical to its reference", c)
	}
	if q := p["int8"]; q.State != precision.StateDivergent || !(float64(q.KL) > pc.MaxKL) || !(q.Top1Agreement < 1) ||
		!(q.KLLowerBound > 0 && q.KLLowerBound <= q.KL) {
		t.Errorf("int8: %+v, want divergent", q)
	}
	t.Logf("copy: kl %.4g top1 %.3f tokens %d; int8: kl %.4g (lower bound %.4g) top1 %.3f rms delta %.3f split %.2f tokens %d",
		p["copy"].KL, p["copy"].Top1Agreement, p["copy"].Tokens, p["int8"].KL, p["int8"].KLLowerBound, p["int8"].Top1Agreement,
		p["int8"].RMSLogprobDelta, p["int8"].SplitShare, p["int8"].Tokens)

	resp, err := http.Get(gwURL + "/admin/signals")
	if err != nil {
		t.Fatal(err)
	}
	var sig struct {
		Precision struct {
			State string
			Pairs []map[string]any
		}
	}
	json.NewDecoder(resp.Body).Decode(&sig)
	resp.Body.Close()
	if sig.Precision.State != "divergent" || len(sig.Precision.Pairs) != 2 {
		t.Errorf("/admin/signals precision: %+v", sig.Precision)
	}
	resp, err = http.Get(gwURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`vigil_precision_divergent{backend="int8",reference="fp16"} 1`,
		`vigil_precision_kl{backend="copy",reference="fp16"} 0`, `vigil_shadow_comparisons_total{backend="int8",outcome="done"}`} {
		if !strings.Contains(string(mb), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grep(string(mb), "precision"))
		}
	}

	a.pipeline.ObserveAlerts(t.Context())
	var fired []map[string]string
	listed, _ := a.pipeline.Alerts(t.Context())
	for _, al := range listed {
		if al.Rule == alert.RulePrecision && al.State == alert.Firing {
			fired = append(fired, al.Labels)
		}
	}
	if len(fired) != 1 || fired[0]["backend"] != "int8" || fired[0]["model"] != "m" || fired[0]["tier"] != "gold" || fired[0]["severity"] != "critical" {
		t.Errorf("precision alerts firing: %v, want one for int8 (model m, tier gold, severity critical)", fired)
	}
}

// precisionPairs evaluates the signals and returns the precision pairs by
// backend.
func precisionPairs(a *App) map[string]precision.PairResult {
	out := map[string]precision.PairResult{}
	if r := a.pipeline.Evaluate().Precision; r != nil {
		for _, p := range r.Pairs {
			out[p.Backend] = p
		}
	}
	return out
}

// TestShadowReferenceDown: a reference that refuses connections costs the
// clients nothing; the failed comparisons are counted.
func TestShadowReferenceDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	cfg := testConfig(simBackend(t, nil))
	cfg.Backends = append(cfg.Backends, config.Backend{Name: "ref", URL: dead, Kind: "openai", Weight: 1, Models: []string{"other"}})
	cfg.Backends[0].Reference = "ref"
	cfg.Analyzers.Precision.SampleRatio = 1
	a, gwURL := startApp(t, cfg)
	const n = 10
	for i := range n {
		body := fmt.Sprintf(`{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"q %d"}]}`, i)
		resp, err := http.Post(gwURL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Vigil-Backend") != "a" {
			t.Fatalf("request %d: %d from %q", i, resp.StatusCode, resp.Header.Get("X-Vigil-Backend"))
		}
	}
	count := func(body, outcome string) int {
		m := regexp.MustCompile(`vigil_shadow_comparisons_total\{backend="a",outcome="` + outcome + `"\} (\d+)`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("/metrics has no %s count", outcome)
		}
		v, _ := strconv.Atoi(m[1])
		return v
	}
	testutil.WaitFor(t, "every sampled comparison to end", func() bool {
		resp, err := http.Get(gwURL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if done := count(string(b), "done"); done != 0 {
			t.Fatalf("%d comparisons done against a dead reference", done)
		}
		return count(string(b), "failed")+count(string(b), "skipped") == n
	})
	if r := a.pipeline.Evaluate().Precision; r.State != precision.StateUnknown {
		t.Errorf("precision with no comparison: %+v", r)
	}
}
