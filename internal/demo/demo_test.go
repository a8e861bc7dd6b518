package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/inputdrift"
)

// TestTrafficBodies: every 20 requests hold 12 chat, 5 Responses and 3
// Messages requests, half of them streaming; each body is JSON in its
// API's shape, names its model, asks for logprobs where the API has them,
// every API asks every prompt of the mix, the system prompt included, and
// no two requests of a model ask the same text.
func TestTrafficBodies(t *testing.T) {
	tr := newTraffic("http://unused", 1)
	for _, m := range []*PromptMix{NormalMix, ShiftedMix} {
		tr.setMix(m)
		var n [numAPIs]int
		streams := 0
		asked := [numAPIs]map[string]bool{{}, {}, {}}
		texts := map[string]bool{}
		const total = 100 * len(apiSlots)
		for i := range total {
			model := servedModels()[i%len(servedModels())]
			a, b := tr.body(model, i)
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
			if r.Model != model {
				t.Fatalf("request %d: model %q, want %q", i, r.Model, model)
			}
			var sys, user string
			switch a {
			case apiChat:
				if len(r.Messages) == 0 || r.MaxTokens == 0 {
					t.Fatalf("chat request %d: %s", i, b)
				}
				if r.Messages[0].Role == "system" {
					sys = r.Messages[0].Content
				}
				user = r.Messages[len(r.Messages)-1].Content
			case apiResponses:
				if len(r.Input) != 1 || r.MaxOutput == 0 || r.TopLogprobs == 0 ||
					len(r.Include) != 1 || r.Include[0] != "message.output_text.logprobs" {
					t.Fatalf("Responses request %d: %s", i, b)
				}
				if r.Instructions != nil {
					sys = *r.Instructions
				}
				user = r.Input[0].Content
			case apiMessages:
				if len(r.Messages) != 1 || r.MaxTokens == 0 || r.Logprobs {
					t.Fatalf("Messages request %d: %s", i, b)
				}
				if r.System != nil {
					sys = *r.System
				}
				user = r.Messages[0].Content
			}
			prompt, ref, ok := strings.Cut(user, " (ref ")
			if !ok || len(ref) != len("000000)") || texts[model+user] {
				t.Fatalf("request %d (%s): prompt %q is not the mix's with a number of its own", i, apiNames[a], user)
			}
			texts[model+user] = true
			asked[a][prompt] = true
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
// every API and every model is answered, none fails, and each model is
// answered only by the backends that serve it, as the gateway read them
// from the backends' /v1/models: the adapter by sim-a, demo-small by
// sim-small.
func TestTrafficAPIs(t *testing.T) {
	d, err := New(Setup{Listen: "127.0.0.1:0", RPS: 50, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if err := d.Serve(ctx, nil); err != nil {
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
	serves := map[string][]string{
		demoModel:  {"sim-a", "sim-b", "sim-a-int8"},
		loraModel:  {"sim-a"},
		SmallModel: {"sim-small"},
	}
	for _, m := range servedModels() {
		if tl.answered(m, "") == 0 {
			t.Errorf("no request for %s answered", m)
		}
	}
	for k, n := range tl.Answers {
		if !slices.Contains(serves[k.model], k.backend) {
			t.Errorf("%d requests for %s answered by %s, which does not serve it", n, k.model, k.backend)
		}
	}
}

// TestModelMix: each mix gives each model its weight's share of the
// slots, spread evenly (a model's requests no further apart than its
// share allows, rounded up, plus one); demo-model is the most used and
// demo-small the least in the normal mix, and the shifted mix swaps them.
func TestModelMix(t *testing.T) {
	for _, m := range []*ModelMix{NormalModels, ShiftedModels} {
		total := 0
		for _, w := range m.weights {
			total += w.weight
		}
		if len(m.slots) != total {
			t.Fatalf("%v: %d slots, want %d", m, len(m.slots), total)
		}
		for _, w := range m.weights {
			var at []int
			for i, s := range m.slots {
				if s == w.model {
					at = append(at, i)
				}
			}
			if len(at) != w.weight {
				t.Errorf("%v: %s has %d slots, want %d", m, w.model, len(at), w.weight)
				continue
			}
			limit := (total+w.weight-1)/w.weight + 1
			for j := range at {
				gap := (at[(j+1)%len(at)] - at[j] + total) % total
				if gap == 0 {
					gap = total
				}
				if gap > limit {
					t.Errorf("%v: %s's slots %d apart, want at most %d", m, w.model, gap, limit)
				}
			}
		}
	}
	n, s := NormalModels, ShiftedModels
	if !(n.Share(demoModel) > n.Share(loraModel) && n.Share(loraModel) > n.Share(SmallModel)) {
		t.Errorf("normal mix %v: want demo-model the most used and demo-small the least", n)
	}
	if s.Share(demoModel) != n.Share(SmallModel) || s.Share(SmallModel) != n.Share(demoModel) || s.Share(loraModel) != n.Share(loraModel) {
		t.Errorf("shifted mix %v: want demo-model's and demo-small's shares of %v swapped", s, n)
	}
}

// TestTopicMixSameShape: each of TopicMix's prompts has its NormalMix
// counterpart's every shape feature, through every API the traffic
// speaks, so that phase (h) moves nothing but what the prompts are about.
func TestTopicMixSameShape(t *testing.T) {
	normal, topic := newTraffic("http://unused", 1), newTraffic("http://unused", 1)
	topic.setMix(TopicMix)
	if len(TopicMix.prompts) != len(NormalMix.prompts) {
		t.Fatalf("%d topic prompts for %d normal ones", len(TopicMix.prompts), len(NormalMix.prompts))
	}
	apiDrift := map[api]inputdrift.API{apiChat: inputdrift.Chat, apiResponses: inputdrift.Responses, apiMessages: inputdrift.Messages}
	for i := range 2 * len(apiSlots) * len(NormalMix.prompts) {
		a, nb := normal.body(demoModel, i)
		_, tb := topic.body(demoModel, i)
		nf, err := inputdrift.ExtractAPI(apiDrift[a], nb)
		if err != nil {
			t.Fatal(err)
		}
		tf, err := inputdrift.ExtractAPI(apiDrift[a], tb)
		if err != nil {
			t.Fatal(err)
		}
		// Compared as printed: NaN (a parameter not set) is not equal
		// to itself.
		if fmt.Sprint(nf) != fmt.Sprint(tf) {
			t.Errorf("request %d (%s): features %+v, the normal mix's %+v", i, apiNames[a], tf, nf)
		}
		if string(nb) == string(tb) {
			t.Errorf("request %d: the same body in both mixes", i)
		}
	}
}
