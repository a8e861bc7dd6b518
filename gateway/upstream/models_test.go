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
	"github.com/vigil-gw/vigil/sim"
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

// TestBaseModel: the pool gives an adapter's base model as a fresh
// discovered list names it: from the simulator (vLLM's list shape) and
// from a recorded vLLM answer; a base model, a model no list names and a
// configured backend's models have none; a stale list gives nothing.
func TestBaseModel(t *testing.T) {
	srv := httptest.NewServer(sim.New(sim.Options{Model: "base", Seed: 1, LoRAModules: []string{"base-lora"}}).Handler())
	t.Cleanup(srv.Close)
	vllm := modelsServer(t, loraList, nil)
	p := newTestPool(t,
		config.Backend{Name: "sim", URL: srv.URL, Kind: KindOpenAI, Metrics: srv.URL + "/metrics", Weight: 1},
		config.Backend{Name: "vllm", URL: vllm, Kind: KindOpenAI, Metrics: vllm + "/metrics", Weight: 1},
		// A configured list is the operator's: its backend is not asked.
		config.Backend{Name: "configured", URL: "http://127.0.0.1:1", Kind: KindOpenAI, Models: []string{"other"}, Weight: 1},
	)
	if got := p.BaseModel("base-lora"); got != "" {
		t.Errorf("before discovery: BaseModel(base-lora) = %q, want none", got)
	}
	var errs []string
	s := &Scraper{Pool: p, Client: http.DefaultClient, ModelsEvery: 1, ModelsStaleAfter: time.Hour,
		OnError: func(b *Backend, source string, err error) { errs = append(errs, b.Name+" "+source+": "+err.Error()) }}
	s.ScrapeAll(context.Background())
	if len(errs) != 0 {
		t.Fatalf("scrape errors: %v", errs)
	}
	for _, tc := range []struct {
		model, want string
	}{
		{"base-lora", "base"},
		{"base", ""},
		{"a1", "llama"},
		{"llama", ""},
		{"other", ""},
		{"unlisted", ""},
		{"", ""},
	} {
		t.Run(tc.model, func(t *testing.T) {
			if got := p.BaseModel(tc.model); got != tc.want {
				t.Errorf("BaseModel(%q) = %q, want %q", tc.model, got, tc.want)
			}
		})
	}
	if got := p.Backends()[0].DiscoveredModels().Parent("base-lora"); got != "base" {
		t.Errorf("the sim's list: Parent(base-lora) = %q, want base", got)
	}
	p.expireModels(time.Now().Add(2*time.Hour), time.Hour)
	if got := p.BaseModel("base-lora"); got != "" {
		t.Errorf("after the lists went stale: BaseModel(base-lora) = %q, want none", got)
	}
}

// TestServesNoAlloc: Serves is on Pick's path, per candidate; BaseModel
// takes no more.
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
		// BaseModel is asked by the analyzers, per segment and rebalance.
		if p.BaseModel(model) != "" {
			n++
		}
	})
	if allocs != 0 {
		t.Errorf("Serves and BaseModel allocate %v times per round", allocs)
	}
	if n == 0 {
		t.Fatal("nothing served")
	}
}

// TestParseModelList: vLLM's list, and what is not one.
func TestParseModelList(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       map[string]string // id → parent
	}{
		{"vllm base", baseList, map[string]string{"llama": ""}},
		{"vllm lora", loraList, map[string]string{"llama": "", "a1": "llama"}},
		{"no parent member", `{"data":[{"id":"m"}]}`, map[string]string{"m": ""}},
		{"parent not a string", `{"data":[{"id":"m","parent":{"id":"x"}},{"id":"n","parent":7}]}`, map[string]string{"m": "", "n": ""}},
		{"parent is the id", `{"data":[{"id":"m","parent":"m"}]}`, map[string]string{"m": ""}},
		{"repeated id keeps a parent", `{"data":[{"id":"a","parent":"b"},{"id":"a","parent":null},{"id":"c"},{"id":"c","parent":"b"}]}`,
			map[string]string{"a": "b", "c": "b"}},
		{"empty id", `{"data":[{"id":"","parent":"b"}]}`, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseModelList([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	for _, bad := range []string{`[]`, `{"object":"list"}`, `not json`, `{"data":"x"}`} {
		if _, err := ParseModelList([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
