package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// TestDriftEndToEnd: prompts go through a real gateway to a simulator; a
// baseline is pinned over HTTP; a change of language then shows as drift in
// /admin/signals and /metrics.
func TestDriftEndToEnd(t *testing.T) {
	cfg := testConfig(simBackend(t, func(k *sim.Knobs) { k.OutputTokens = 4 }))
	an := &cfg.Analyzers
	// The current window is the newest buckets holding at least MinRequests
	// prompts. With MinRequests equal to the prompts of each phase, a window
	// of 250 means every prompt of the phase has been analysed, whichever
	// 1-second buckets the phase happened to span.
	an.Bucket, an.MinRequests, an.Window, an.Consecutive = time.Second, 250, time.Hour, 1
	a, gwURL := startApp(t, cfg)

	send := func(words []string, n int) {
		for i := range n {
			var sb strings.Builder
			for j := range 20 + i%17 {
				sb.WriteString(words[(i*7+j*3)%len(words)])
				sb.WriteByte(' ')
			}
			body := fmt.Sprintf(`{"model":"m","max_tokens":4,"messages":[{"role":"user","content":%q}]}`, sb.String())
			resp, err := http.Post(gwURL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	signals := func() (state string, body string) {
		resp, err := http.Get(gwURL + "/admin/signals")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var s struct{ Drift struct{ State string } }
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("/admin/signals: %v: %s", err, b)
		}
		return s.Drift.State, string(b)
	}

	english := strings.Fields("the quick brown fox jumps over the lazy dog while the model answers questions about latency")
	chinese := strings.Fields("系统 报告 用户 错误 延迟 模型 请求 回答 总结 解释 数据 表格 代码 测试 服务 集群")
	send(english, 250)
	testutil.WaitFor(t, "prompts analysed", func() bool { return a.pipeline.Evaluate().Drift.Current >= 250 })
	resp, err := http.Post(gwURL+"/admin/baseline", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /admin/baseline: %d", resp.StatusCode)
	}
	// The current window is the 250 English prompts: nothing has changed.
	if st, body := signals(); st != "ok" {
		t.Fatalf("state after pinning = %q, want ok: %s", st, body)
	}
	nextBucket(t, a, 250, an.Bucket) // new prompts in a later bucket
	send(chinese, 250)
	testutil.WaitFor(t, "drift", func() bool { return a.pipeline.Evaluate().Drift.State == "drift" })
	st, body := signals()
	if st != "drift" || !strings.Contains(body, `"name":"script_cjk"`) {
		t.Errorf("signals: %s", body)
	}
	mresp, err := http.Get(gwURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !strings.Contains(string(mb), "vigil_drift_alarm 1") || !strings.Contains(string(mb), `vigil_drift_psi{feature="script_cjk"}`) {
		t.Errorf("/metrics lacks the drift alarm:\n%s", grep(string(mb), "vigil_drift"))
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestFeedbackEndToEnd: a response with logprobs is labelled through
// POST /v1/feedback and counted in the calibration; unknown ids get 404.
func TestFeedbackEndToEnd(t *testing.T) {
	a, gwURL := startApp(t, testConfig(simBackend(t, nil)))

	resp, err := http.Post(gwURL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","max_tokens":8,"logprobs":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ ID string }
	json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	feedback := func(id string) int {
		resp, err := http.Post(gwURL+"/v1/feedback", "application/json", strings.NewReader(fmt.Sprintf(`{"id":%q,"correct":true}`, id)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// The analyzers see the response off the request path: wait for them.
	testutil.WaitFor(t, "the response to be remembered", func() bool { return feedback(c.ID) == 200 })
	if code := feedback("chatcmpl-nope"); code != 404 {
		t.Errorf("unknown id: %d, want 404", code)
	}
	if n := a.pipeline.Evaluate().Confidence.Calibration.Labels; n != 1 {
		t.Errorf("calibration labels = %d, want 1", n)
	}
}
