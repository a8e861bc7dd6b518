package upstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/config"
)

// modelsServer serves body as its /v1/models while ok is true, a 500 after.
func modelsServer(t *testing.T, body string, ok *atomic.Bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			w.Write([]byte("vllm:num_requests_running 0\n"))
			return
		}
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		if ok != nil && !ok.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// vLLM's /v1/models with a LoRA adapter: the adapter's "parent" is the
// base model.
const (
	baseList = `{"object":"list","data":[{"id":"llama","object":"model","created":1764400000,"owned_by":"vllm","root":"/models/llama","parent":null,"max_model_len":8192}]}`
	loraList = `{"object":"list","data":[{"id":"llama","object":"model","created":1764400000,"owned_by":"vllm","root":"/models/llama","parent":null,"max_model_len":8192},` +
		`{"id":"a1","object":"model","created":1764400000,"owned_by":"vllm","root":"/adapters/a1","parent":"llama","max_model_len":null}]}`
)

// TestModelDiscovery: three vLLM backends without configured lists, one
// of which lists the adapter a1: a1 goes only there, the base model and
// models nobody lists anywhere; a backend without a list (TGI) serves
// every model; a failed read keeps the last list until it is stale, then
// that backend serves every model again and a1 is nobody's.
func TestModelDiscovery(t *testing.T) {
	up := &atomic.Bool{}
	up.Store(true)
	vllm := func(name, list string, up *atomic.Bool) config.Backend {
		u := modelsServer(t, list, up)
		return config.Backend{Name: name, URL: u, Kind: KindOpenAI, Metrics: u + "/metrics", Weight: 1}
	}
	p := newTestPool(t, vllm("lora", loraList, up), vllm("b", baseList, nil), vllm("c", baseList, nil),
		config.Backend{Name: "tgi", URL: "http://127.0.0.1:1", Kind: KindTGI, Weight: 1},
		config.Backend{Name: "configured", URL: "http://127.0.0.1:1", Kind: KindOpenAI, Models: []string{"other"}, Weight: 1},
		// Not scraped: never asked for its list.
		config.Backend{Name: "unscraped", URL: "http://127.0.0.1:1", Kind: KindOpenAI, Weight: 1},
	)
	var errs []string
	s := &Scraper{Pool: p, Client: http.DefaultClient, ModelsEvery: 2, ModelsStaleAfter: time.Hour,
		OnError: func(b *Backend, source string, err error) { errs = append(errs, b.Name+" "+source) }}
	serving := func(model string) []string {
		var out []string
		for _, b := range p.Backends() {
			if b.Serves(model) {
				out = append(out, b.Name)
			}
		}
		return out
	}
	if diff := cmp.Diff([]string{"lora", "b", "c", "tgi", "unscraped"}, serving("a1")); diff != "" {
		t.Errorf("before discovery, a1 (-want +got):\n%s", diff)
	}
	s.ScrapeAll(context.Background())
	if len(errs) != 0 {
		t.Fatalf("scrape errors: %v", errs)
	}
	for _, tc := range []struct {
		model string
		want  []string
	}{
		{"a1", []string{"lora", "tgi", "unscraped"}}, // without a list: they may serve anything
		{"llama", []string{"lora", "b", "c", "tgi", "unscraped"}},
		{"unlisted", []string{"lora", "b", "c", "tgi", "unscraped"}},
		{"other", []string{"lora", "b", "c", "tgi", "configured", "unscraped"}},
		{"", []string{"lora", "b", "c", "tgi", "configured", "unscraped"}},
	} {
		if diff := cmp.Diff(tc.want, serving(tc.model)); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.model, diff)
		}
	}
	if !p.Listed("a1") || p.Listed("unlisted") {
		t.Errorf("Listed: a1 %v, unlisted %v; want true, false", p.Listed("a1"), p.Listed("unlisted"))
	}
	if diff := cmp.Diff([]string{"a1", "llama"}, p.Backends()[0].DiscoveredModels().IDs()); diff != "" {
		t.Errorf("discovered (-want +got):\n%s", diff)
	}

	// The lora server's list cannot be read: round 2 does not read lists
	// (ModelsEvery 2), round 3 fails; the last good list still routes.
	up.Store(false)
	s.ScrapeAll(context.Background())
	s.ScrapeAll(context.Background())
	if diff := cmp.Diff([]string{"lora models"}, errs); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"lora", "tgi", "unscraped"}, serving("a1")); diff != "" {
		t.Errorf("after a failed read, a1 (-want +got):\n%s", diff)
	}
	// Stale: the list is dropped, a1 is no longer known to anyone.
	p.expireModels(time.Now().Add(2*time.Hour), time.Hour)
	if p.Backends()[0].DiscoveredModels() != nil || p.Listed("a1") {
		t.Error("a stale list is still used")
	}
	if diff := cmp.Diff([]string{"lora", "b", "c", "tgi", "unscraped"}, serving("a1")); diff != "" {
		t.Errorf("after the list went stale, a1 (-want +got):\n%s", diff)
	}
}

// TestServesNoAlloc: Serves is on Pick's path, per candidate.
func TestServesNoAlloc(t *testing.T) {
	p := newTestPool(t,
		config.Backend{Name: "a", URL: "http://h:1", Kind: KindOpenAI, Weight: 1},
		config.Backend{Name: "b", URL: "http://h:2", Kind: KindOpenAI, Weight: 1},
		config.Backend{Name: "c", URL: "http://h:3", Kind: KindOpenAI, Models: []string{"m"}, Weight: 1},
	)
	ids, err := ParseModelList([]byte(loraList))
	if err != nil {
		t.Fatal(err)
	}
	p.Backends()[0].StoreDiscoveredModels(&ModelSet{ids: ids, AsOf: time.Now()})
	model := string([]byte("a1")) // not a constant: as a request's model is
	var n int
	allocs := testing.AllocsPerRun(1000, func() {
		for _, b := range p.Backends() {
			for _, m := range []string{model, "llama", "unlisted", "m"} {
				if b.Serves(m) {
					n++
				}
			}
		}
	})
	if allocs != 0 {
		t.Errorf("Serves allocates %v times per round", allocs)
	}
	if n == 0 {
		t.Fatal("nothing served")
	}
}

// TestParseModelList: vLLM's list, and what is not one.
func TestParseModelList(t *testing.T) {
	ids, err := ParseModelList([]byte(loraList))
	if err != nil || len(ids) != 2 {
		t.Errorf("lora list: %v %v", ids, err)
	}
	for _, bad := range []string{`[]`, `{"object":"list"}`, `not json`, `{"data":"x"}`} {
		if _, err := ParseModelList([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
