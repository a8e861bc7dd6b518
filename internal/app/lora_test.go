package app

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// TestLoRABaseModel: a vLLM-like backend serving model "base" with the
// LoRA adapter "base-lora", whose /v1/models the gateway reads (it has a
// metrics endpoint): the adapter's segment in /admin/signals names its
// base model, read from that list through the gateway's pool; the base
// model's segment names none.
func TestLoRABaseModel(t *testing.T) {
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL = 0, 0
	srv := httptest.NewServer(sim.New(sim.Options{Model: "base", Seed: 1, LoRAModules: []string{"base-lora"}, Knobs: k}).Handler())
	t.Cleanup(srv.Close)
	cfg := testConfig(srv.URL)
	cfg.Backends[0].Metrics = srv.URL + "/metrics"
	// The first scrape round reads the model list; a short interval
	// keeps a retry near should that read fail.
	cfg.Balancer.ScrapeInterval = 100 * time.Millisecond
	a, url := startApp(t, cfg)

	for _, model := range []string{"base-lora", "base", "base-lora"} {
		code, _, body := testutil.Post(t, url+"/v1/chat/completions",
			`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", model, code, body)
		}
	}
	segment := func(model string) (int, []byte) {
		return testutil.Get(t, url+"/admin/signals?model="+model)
	}
	// The responses reach the analyzers asynchronously, and the list is
	// read by the gateway's scraper: evaluate (which rebalances the
	// segments, asking again for a base model not known yet) until the
	// adapter's segment shows its base and the base model's request has
	// a segment too (the adapter's first request may get there alone).
	testutil.WaitFor(t, `the segment of base-lora with "base_model":"base", and base's`, func() bool {
		a.pipeline.Evaluate()
		code, b := segment("base-lora")
		baseCode, _ := segment("base")
		return code == http.StatusOK && bytes.Contains(b, []byte(`"model":"base-lora","base_model":"base"`)) && baseCode == http.StatusOK
	})

	code, b := segment("base")
	if code != http.StatusOK {
		t.Fatalf("?model=base: %d %s", code, b)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("?model=base: %v: %s", err, b)
	}
	if got["model"] != "base" {
		t.Errorf("?model=base: segment %v, want its own (base): %s", got["model"], b)
	}
	if v, ok := got["base_model"]; ok {
		t.Errorf("?model=base: base_model %v, want none: %s", v, b)
	}
}
