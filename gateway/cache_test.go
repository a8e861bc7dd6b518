package gateway

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/sim"
	"github.com/vigil-gw/vigil/state"
	"github.com/vigil-gw/vigil/state/redistest"
)

// TestCacheStampede: 100 concurrent identical deterministic requests cause
// one upstream call; every client gets the same bytes; later ones are hits.
func TestCacheStampede(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "json", true: "sse"}[stream]
		t.Run(name, func(t *testing.T) {
			s, url := startSim(t, "m1", func(k *sim.Knobs) { k.TTFT = 100 * time.Millisecond })
			gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, func(c *config.Config) { c.Cache.Enabled = true })
			body := `{"model":"m1","temperature":0,"max_tokens":8,"messages":[{"role":"user","content":"cache me"}]}`
			if stream {
				body = `{"model":"m1","temperature":0,"max_tokens":8,"stream":true,"messages":[{"role":"user","content":"cache me"}]}`
			}
			bodies := make([]string, 100)
			caches := make([]string, 100)
			var wg sync.WaitGroup
			for i := range 100 {
				wg.Go(func() {
					resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
					if err != nil {
						t.Error(err)
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					bodies[i], caches[i] = string(b), resp.Header.Get("X-Vigil-Cache")
				})
			}
			wg.Wait()
			if n := s.Stats().Requests; n != 1 {
				t.Errorf("upstream calls = %d, want 1", n)
			}
			misses := 0
			for i := range bodies {
				if bodies[i] != bodies[0] || bodies[i] == "" {
					t.Fatalf("client %d got different bytes", i)
				}
				if caches[i] == "miss" {
					misses++
				}
			}
			if misses != 1 {
				t.Errorf("%d misses, want 1", misses)
			}
			// Formatting does not matter; sampling does.
			code, hdr, _ := post(t, gw.URL+"/v1/chat/completions", strings.ReplaceAll(body, `,"max_tokens":8`, `, "max_tokens" : 8`))
			if code != 200 || hdr.Get("X-Vigil-Cache") != "hit" {
				t.Errorf("reformatted body: %d, cache %q", code, hdr.Get("X-Vigil-Cache"))
			}
			_, hdr, _ = post(t, gw.URL+"/v1/chat/completions", strings.Replace(body, `"temperature":0`, `"temperature":0.7`, 1))
			if hdr.Get("X-Vigil-Cache") != "" {
				t.Errorf("a sampled request went through the cache (%q)", hdr.Get("X-Vigil-Cache"))
			}
		})
	}
}

// TestCacheAcrossReplicas: two gateways sharing a real Redis; 50 identical
// requests to each, at once: one upstream call in all.
func TestCacheAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	rc, err := state.OpenRedis(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	store := state.NewRedis(rc, "cachetest")
	s, url := startSim(t, "m1", func(k *sim.Knobs) { k.TTFT = 200 * time.Millisecond })
	var gws []*testGateway
	for _, replica := range []string{"r1", "r2"} {
		gws = append(gws, startGateway(t, []config.Backend{backend("a", url, "m1")},
			func(c *config.Config) { c.Cache.Enabled = true },
			func(o *Options) { o.SharedStore, o.Replica = store, replica }))
	}
	body := `{"model":"m1","seed":7,"max_tokens":8,"messages":[{"role":"user","content":"shared"}]}`
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			code, _, _ := post(t, gws[i%2].URL+"/v1/chat/completions", body)
			if code != 200 {
				t.Errorf("status %d", code)
			}
		})
	}
	wg.Wait()
	if n := s.Stats().Requests; n != 1 {
		t.Errorf("upstream calls = %d across two replicas, want 1", n)
	}
}

// TestCacheHitObserved pins what a cache hit is to the analyzers: a prompt
// clients sent (OnPrompt) that the gateway answered itself (no OnRequest,
// an OnResponse without a backend), so that no backend's series, and no
// series of a backend named "cache", counts it. The access log and the
// X-Vigil-Backend header still name the cache.
func TestCacheHitObserved(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	rec := &recorder{}
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, func(c *config.Config) { c.Cache.Enabled = true },
		func(o *Options) { o.Observer = rec })
	body := `{"model":"m1","temperature":0,"max_tokens":4,"messages":[{"role":"user","content":"cache me"}]}`
	for i, want := range []string{"a", "cache"} {
		resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := resp.Header.Get("X-Vigil-Backend"); resp.StatusCode != http.StatusOK || got != want {
			t.Fatalf("request %d: %d, X-Vigil-Backend %q, want 200 from %q", i, resp.StatusCode, got, want)
		}
	}
	waitFor(t, "two responses", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.resps) == 2 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.prompts) != 2 || len(rec.reqs) != 1 {
		t.Errorf("%d prompts and %d requests observed, want 2 and 1 (the miss alone reached a backend)", len(rec.prompts), len(rec.reqs))
	}
	if b := rec.ended[0].Backend; b != "a" {
		t.Errorf("the miss ended with backend %q, want a", b)
	}
	if b := rec.ended[1].Backend; b != "" || rec.resps[1].Status != http.StatusOK {
		t.Errorf("the hit ended with backend %q, status %d: want none, 200", b, rec.resps[1].Status)
	}
	waitFor(t, "access log", func() bool { return len(gw.access.lines(t)) == 2 })
	if got := gw.access.lines(t)[1]["backend"]; got != "cache" {
		t.Errorf("access log backend %v, want cache", got)
	}
}
