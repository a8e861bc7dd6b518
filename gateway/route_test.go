package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/balance/affinity"
)

// TestRouteDecision: under the prefix strategy a tenant's first request is
// placed, its next turn follows it by match, and both the server span and
// the access log say so; a body the hasher cannot use is routed by load
// and still served.
func TestRouteDecision(t *testing.T) {
	var backends []config.Backend
	for _, name := range []string{"a", "b", "c"} {
		_, url := startSim(t, "m1", nil)
		backends = append(backends, backend(name, url, "m1"))
	}
	gw, rcv, p := tracedGateway(t, backends, nil)
	system := strings.Repeat("You answer questions about the ACME printer manual. ", 20)
	turn := func(n int) string {
		msgs := fmt.Sprintf(`{"role":"system","content":%q},{"role":"user","content":"question one"}`, system)
		if n > 1 {
			msgs += `,{"role":"assistant","content":"answer one"},{"role":"user","content":"question two"}`
		}
		return `{"model":"m1","max_tokens":2,"messages":[` + msgs + `]}`
	}
	var served []string
	for _, body := range []string{turn(1), turn(2), `{"model":"m1","max_tokens":2,"messages":[{"role":"user","content":[{"type":"image_url","image_url":7}]}]}`} {
		status, h, b := gw.post(t, "/v1/chat/completions", body)
		if status != 200 {
			t.Fatalf("status %d: %s", status, b)
		}
		served = append(served, h.Get("X-Vigil-Backend"))
	}
	if served[0] == "" || served[1] != served[0] {
		t.Errorf("the next turn went to %q, the first to %q", served[1], served[0])
	}

	var lines []map[string]any
	waitFor(t, "three access log lines", func() bool { lines = gw.access.lines(t); return len(lines) == 3 })
	want := []struct {
		reason  string
		matched bool
	}{{"placement", false}, {"match", true}, {"short", false}}
	for i, w := range want {
		l := lines[i]
		if l["route_strategy"] != "prefix" || l["route_reason"] != w.reason || l["route_guard"] != false {
			t.Errorf("line %d: strategy %v reason %v guard %v, want prefix %s false", i, l["route_strategy"], l["route_reason"], l["route_guard"], w.reason)
		}
		blocks, _ := l["route_blocks"].(float64)
		matched, _ := l["route_matched"].(float64)
		if w.reason != "short" && blocks < 4 || (matched > 0) != w.matched || matched > blocks {
			t.Errorf("line %d: %v blocks, %v matched", i, blocks, matched)
		}
	}

	p.Shutdown(context.Background())
	spans := rcv.WaitFor(t, 9, 5*time.Second)
	var reasons []any
	for _, sp := range spans {
		if sp.Name != "POST /v1/chat/completions" {
			continue
		}
		reasons = append(reasons, sp.Attributes["vigil.route.reason"])
		if sp.Attributes["vigil.route.strategy"] != "prefix" || sp.Attributes["vigil.route.guard_override"] != false {
			t.Errorf("server span attributes %v", sp.Attributes)
		}
		if sp.Attributes["vigil.route.reason"] == "match" {
			if m, _ := sp.Attributes["vigil.route.matched_blocks"].(int64); m < 4 {
				t.Errorf("matched span: %v", sp.Attributes)
			}
		}
	}
	if len(reasons) != 3 {
		t.Fatalf("server spans' reasons %v", reasons)
	}
	for _, r := range []string{"placement", "match", "short"} {
		found := false
		for _, got := range reasons {
			found = found || got == r
		}
		if !found {
			t.Errorf("no server span with reason %s: %v", r, reasons)
		}
	}
}

// TestRouteOtherStrategies: the other strategies log their name and no
// prefix figures.
func TestRouteOtherStrategies(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	_, url2 := startSim(t, "m1", nil)
	gw := startGateway(t, []config.Backend{backend("a", url, "m1"), backend("b", url2, "m1")}, func(c *config.Config) {
		c.Balancer.Strategy = config.StrategyDynamic
	})
	if status, _, b := gw.post(t, "/v1/chat/completions", `{"model":"m1","max_tokens":2,"messages":[{"role":"user","content":"`+strings.Repeat("x", 2000)+`"}]}`); status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	var lines []map[string]any
	waitFor(t, "one access log line", func() bool { lines = gw.access.lines(t); return len(lines) == 1 })
	if l := lines[0]; l["route_strategy"] != "dynamic" || l["route_blocks"] != 0.0 || l["route_reason"] != "" {
		t.Errorf("access line %v", l)
	}
}

// TestRouteOwnerFirst: a Responses follow-up goes to the backend that holds
// the response it follows, even when the prefix index points elsewhere,
// and the access log says it was the owner's pin.
func TestRouteOwnerFirst(t *testing.T) {
	urlA, urlB := startSimSeed(t, "m1", 1), startSimSeed(t, "m1", 2)
	gw := startGateway(t, []config.Backend{backend("a", urlA, "m1"), backend("b", urlB, "m1")}, nil)
	instructions := strings.Repeat("Answer as the ACME support desk would. ", 20)
	st, h, b := doJSON(t, http.MethodPost, gw.URL+"/v1/responses", `{"model":"m1","instructions":"`+instructions+`","input":"first","max_output_tokens":2}`)
	if st != 200 {
		t.Fatalf("create: %d %s", st, b)
	}
	owner := h.Get("X-Vigil-Backend")
	var r struct{ ID string }
	if err := json.Unmarshal(b, &r); err != nil || r.ID == "" {
		t.Fatalf("no id in %s", b)
	}
	follow := `{"model":"m1","instructions":"` + instructions + `","input":"` + strings.Repeat("second question ", 64) + `","max_output_tokens":2,"previous_response_id":"` + r.ID + `"}`
	// The index says the other backend holds the whole follow-up, the
	// owner only its instructions.
	var k affinity.Key
	if !gw.Balancer().Hasher().Compute(&k, exchange.OpResponses, []byte(follow), "") || k.N == 0 {
		t.Fatal("no key for the follow-up")
	}
	other := 0
	if gw.pool.Backends()[0].Name == owner {
		other = 1
	}
	gw.Balancer().Index().Record(k.Chain(), other)
	st, h, b = doJSON(t, http.MethodPost, gw.URL+"/v1/responses", follow)
	if st != 200 || h.Get("X-Vigil-Backend") != owner {
		t.Fatalf("follow-up: %d from %q, want 200 from the owner %q: %s", st, h.Get("X-Vigil-Backend"), owner, b)
	}
	var lines []map[string]any
	waitFor(t, "two access log lines", func() bool { lines = gw.access.lines(t); return len(lines) == 2 })
	if l := lines[1]; l["route_strategy"] != "owner" || l["route_reason"] != "" {
		t.Errorf("follow-up's access line %v", l)
	}
	if l := lines[0]; l["route_strategy"] != "prefix" || l["route_reason"] != "placement" {
		t.Errorf("first request's access line %v", l)
	}
}
