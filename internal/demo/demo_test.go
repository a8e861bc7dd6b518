package demo

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// TestTrafficBodies: every 20 requests hold 12 chat, 5 Responses and 3
// Messages requests, half of them streaming; each body is JSON in its
// API's shape, asks for logprobs where the API has them, and every API
// asks every prompt of the mix, the system prompt included.
func TestTrafficBodies(t *testing.T) {
	tr := newTraffic("http://unused", 1)
	for _, m := range []*promptMix{normalMix, shiftedMix} {
		tr.setMix(m)
		var n [numAPIs]int
		streams := 0
		asked := [numAPIs]map[string]bool{{}, {}, {}}
		const total = 100 * len(apiSlots)
		for i := range total {
			a, b := tr.body(i)
			n[a]++
			var r struct {
				Model        string
				Stream       bool
				Messages     []struct{ Role, Content string }
				Input        []struct{ Role, Content string }
				Instructions *string
				System       *string
				Logprobs     bool
				TopLogprobs  int `json:"top_logprobs"`
				Include      []string
				MaxTokens    int `json:"max_tokens"`
				MaxOutput    int `json:"max_output_tokens"`
			}
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatalf("request %d (%s): %v\n%s", i, apiNames[a], err, b)
			}
			if r.Stream {
				streams++
			}
			if r.Model != demoModel {
				t.Fatalf("request %d: model %q", i, r.Model)
			}
			var sys string
			switch a {
			case apiChat:
				if len(r.Messages) == 0 || r.MaxTokens == 0 {
					t.Fatalf("chat request %d: %s", i, b)
				}
				if r.Messages[0].Role == "system" {
					sys = r.Messages[0].Content
				}
				asked[a][r.Messages[len(r.Messages)-1].Content] = true
			case apiResponses:
				if len(r.Input) != 1 || r.MaxOutput == 0 || r.TopLogprobs == 0 ||
					len(r.Include) != 1 || r.Include[0] != "message.output_text.logprobs" {
					t.Fatalf("Responses request %d: %s", i, b)
				}
				if r.Instructions != nil {
					sys = *r.Instructions
				}
				asked[a][r.Input[0].Content] = true
			case apiMessages:
				if len(r.Messages) != 1 || r.MaxTokens == 0 || r.Logprobs {
					t.Fatalf("Messages request %d: %s", i, b)
				}
				if r.System != nil {
					sys = *r.System
				}
				asked[a][r.Messages[0].Content] = true
			}
			if sys != m.system {
				t.Fatalf("request %d (%s): system prompt %q, want %q", i, apiNames[a], sys, m.system)
			}
		}
		if want := [numAPIs]int{total * 60 / 100, total * 25 / 100, total * 15 / 100}; n != want {
			t.Errorf("requests by API %v, want %v", n, want)
		}
		if streams != total/2 {
			t.Errorf("%d of %d requests stream, want half", streams, total)
		}
		for a := range numAPIs {
			if len(asked[a]) != len(m.prompts) {
				t.Errorf("%s asked %d of the %d prompts", apiNames[a], len(asked[a]), len(m.prompts))
			}
		}
	}
}

// TestTrafficAPIs sends demo traffic through the gateway for a moment:
// every API is answered, none fails.
func TestTrafficAPIs(t *testing.T) {
	d, err := newDemo(demoOptions{listen: "127.0.0.1:0", rps: 50, log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := d.run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	tl := d.traffic.Tally()
	if tl.Failed > 0 || tl.OK == 0 {
		t.Errorf("%d requests sent, %d answered, %d failed", tl.Sent, tl.OK, tl.Failed)
	}
	for a := range numAPIs {
		if tl.ByAPI[a] == 0 {
			t.Errorf("no %s request answered (by API: %v)", apiNames[a], tl.ByAPI)
		}
	}
}
