package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
	"github.com/vigil-gw/vigil/state"
)

// startSimSeed is startSim with a seed of its own, so that two simulators
// make different response ids for the same request.
func startSimSeed(t *testing.T, model string, seed int64) string {
	t.Helper()
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL = time.Millisecond, 0
	s := sim.New(sim.Options{Model: model, Seed: seed, Created: 1764400000, Knobs: k})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// doJSON sends method url with a JSON body ("" for none) and returns the status,
// headers and body.
func doJSON(t *testing.T, method, url, body string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	resp, b := do(t, method, url, "application/json", rd)
	return resp.StatusCode, resp.Header, b
}

func wantUsage(t *testing.T, line map[string]any, prompt, completion int, source string) {
	t.Helper()
	if line["prompt_tokens"] != float64(prompt) || line["completion_tokens"] != float64(completion) || line["usage_source"] != source {
		t.Errorf("access log usage %v/%v/%v, want %d/%d/%s", line["prompt_tokens"], line["completion_tokens"], line["usage_source"], prompt, completion, source)
	}
}

func TestResponsesAPI(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, nil)
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := responses.ResponseNewParams{
		Model:           "m1",
		Instructions:    openai.String("Be brief."),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("What is a gateway?")},
		MaxOutputTokens: openai.Int(6),
	}
	var hr *http.Response
	resp, err := client.Responses.New(ctx, params, option.WithResponseInto(&hr))
	if err != nil {
		t.Fatal(err)
	}
	if resp.OutputText() == "" || resp.Usage.OutputTokens != 6 || !strings.HasPrefix(resp.ID, "resp_") {
		t.Fatalf("response %s", resp.RawJSON())
	}
	wantUsage(t, accessLine(t, gw, hr.Header.Get("X-Request-Id")), int(resp.Usage.InputTokens), 6, "reported")

	t.Run("same as direct", func(t *testing.T) {
		body := `{"model":"m1","input":"Hello there","max_output_tokens":4}`
		st, _, viaGW := doJSON(t, http.MethodPost, gw.URL+"/v1/responses", body)
		st2, _, direct := doJSON(t, http.MethodPost, url+"/v1/responses", body)
		if st != 200 || st2 != 200 || string(viaGW) != string(direct) {
			t.Errorf("via gateway %d %s\ndirect %d %s", st, viaGW, st2, direct)
		}
	})

	t.Run("streaming", func(t *testing.T) {
		var hr *http.Response
		stream := client.Responses.NewStreaming(ctx, params, option.WithResponseInto(&hr))
		defer stream.Close()
		var text strings.Builder
		var done responses.Response
		for stream.Next() {
			switch ev := stream.Current().AsAny().(type) {
			case responses.ResponseTextDeltaEvent:
				text.WriteString(ev.Delta)
			case responses.ResponseCompletedEvent:
				done = ev.Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if text.String() != resp.OutputText() || done.Usage.OutputTokens != 6 {
			t.Errorf("streamed %q, completed %s; plain %q", text.String(), done.RawJSON(), resp.OutputText())
		}
		stream.Close()
		line := accessLine(t, gw, hr.Header.Get("X-Request-Id"))
		wantUsage(t, line, int(done.Usage.InputTokens), 6, "reported")
		if line["stream"] != true || line["itl_p50_ms"] == nil {
			t.Errorf("access log %v", line)
		}
		// The stored response is found on its backend.
		got, err := client.Responses.Get(ctx, done.ID, responses.ResponseGetParams{})
		if err != nil || got.OutputText() != done.OutputText() {
			t.Errorf("get streamed response: %v %v", got, err)
		}
	})

	t.Run("stream byte for byte", func(t *testing.T) {
		body := `{"model":"m1","input":"Hi","max_output_tokens":3,"stream":true}`
		_, h, viaGW := doJSON(t, http.MethodPost, gw.URL+"/v1/responses", body)
		_, _, direct := doJSON(t, http.MethodPost, url+"/v1/responses", body)
		if string(viaGW) != string(direct) || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
			t.Errorf("via gateway %q\ndirect %q", viaGW, direct)
		}
	})

	t.Run("stored routes", func(t *testing.T) {
		items, err := client.Responses.InputItems.List(ctx, resp.ID, responses.InputItemListParams{})
		if err != nil || len(items.Data) != 1 {
			t.Fatalf("input items: %v %v", items, err)
		}
		p := params
		p.PreviousResponseID = openai.String(resp.ID)
		next, err := client.Responses.New(ctx, p)
		if err != nil || next.PreviousResponseID != resp.ID {
			t.Fatalf("follow-up: %v %v", next, err)
		}
		var apiErr *openai.Error
		if _, err := client.Responses.Cancel(ctx, resp.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest {
			t.Errorf("cancel: %v (the backend's own 400 passes)", err)
		}
		if err := client.Responses.Delete(ctx, resp.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Responses.Get(ctx, resp.ID, responses.ResponseGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
			t.Errorf("get after delete: %v", err)
		}
	})

	t.Run("unknown id", func(t *testing.T) {
		for _, c := range []struct{ method, path, body string }{
			{http.MethodGet, "/v1/responses/resp_nowhere", ""},
			{http.MethodDelete, "/v1/responses/resp_nowhere", ""},
			{http.MethodPost, "/v1/responses/resp_nowhere/cancel", ""},
			{http.MethodGet, "/v1/responses/resp_nowhere/input_items", ""},
			{http.MethodPost, "/v1/responses", `{"model":"m1","input":"x","previous_response_id":"resp_nowhere"}`},
		} {
			st, _, b := doJSON(t, c.method, gw.URL+c.path, c.body)
			var e struct {
				Error struct{ Code, Message string }
			}
			if st != http.StatusNotFound || json.Unmarshal(b, &e) != nil || e.Error.Code != "response_not_found" ||
				!strings.Contains(e.Error.Message, "resp_nowhere") {
				t.Errorf("%s %s: %d %s", c.method, c.path, st, b)
			}
		}
	})
}

func TestMessagesAPI(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, nil)
	client := anthropic.NewClient(anthropicoption.WithBaseURL(gw.URL), anthropicoption.WithAPIKey("unused"), anthropicoption.WithMaxRetries(0))
	ctx := context.Background()
	params := anthropic.MessageNewParams{
		Model:     "m1",
		MaxTokens: 6,
		System:    []anthropic.TextBlockParam{{Text: "Be brief."}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What is a gateway?"))},
	}
	var hr *http.Response
	msg, err := client.Messages.New(ctx, params, anthropicoption.WithResponseInto(&hr))
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text == "" || msg.Usage.OutputTokens != 6 {
		t.Fatalf("message %s", msg.RawJSON())
	}
	wantUsage(t, accessLine(t, gw, hr.Header.Get("X-Request-Id")), int(msg.Usage.InputTokens), 6, "reported")

	t.Run("same as direct", func(t *testing.T) {
		for _, body := range []string{
			`{"model":"m1","max_tokens":4,"messages":[{"role":"user","content":"Hello"}]}`,
			`{"model":"m1","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"Hello"}]}`,
		} {
			_, _, viaGW := doJSON(t, http.MethodPost, gw.URL+"/v1/messages", body)
			_, _, direct := doJSON(t, http.MethodPost, url+"/v1/messages", body)
			if string(viaGW) != string(direct) {
				t.Errorf("via gateway %q\ndirect %q", viaGW, direct)
			}
		}
	})

	t.Run("streaming", func(t *testing.T) {
		var hr *http.Response
		stream := client.Messages.NewStreaming(ctx, params, anthropicoption.WithResponseInto(&hr))
		defer stream.Close()
		var acc anthropic.Message
		for stream.Next() {
			if err := acc.Accumulate(stream.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if acc.Content[0].Text != msg.Content[0].Text || acc.Usage.OutputTokens != 6 {
			t.Errorf("accumulated %s; plain %s", acc.RawJSON(), msg.RawJSON())
		}
		stream.Close()
		wantUsage(t, accessLine(t, gw, hr.Header.Get("X-Request-Id")), int(msg.Usage.InputTokens), 6, "reported")
	})

	t.Run("count tokens", func(t *testing.T) {
		n, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
			Model:    "m1",
			System:   anthropic.MessageCountTokensParamsSystemUnion{OfString: anthropic.String("Be brief.")},
			Messages: params.Messages,
		})
		if err != nil || n.InputTokens != msg.Usage.InputTokens {
			t.Errorf("count tokens %v %v", n, err)
		}
	})

	t.Run("gateway error in Anthropic's shape", func(t *testing.T) {
		p := params
		p.Model = "unknown"
		_, err := client.Messages.New(ctx, p)
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || !strings.Contains(apiErr.Error(), "not_found_error") {
			t.Errorf("error %v", err)
		}
	})
}

// TestAPIBadRequests: bad bodies on each new route are the gateway's 400,
// and bodies over the limit its 413, in the route's API's shape.
func TestAPIBadRequests(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, func(c *config.Config) { c.Limits.MaxBodyBytes = 256 })
	big := `{"model":"m1","input":"` + strings.Repeat("x", 300) + `"}`
	for _, c := range []struct {
		path, body string
		status     int
		anthropic  bool
		errType    string
	}{
		{"/v1/responses", `{"model":"m1","input":5}`, 400, false, "invalid_request_error"},
		{"/v1/responses", `{"model":"m1","input":"x","previous_response_id":7}`, 400, false, "invalid_request_error"},
		{"/v1/responses", `{"model":"m1","input":"x","conversation":[]}`, 400, false, "invalid_request_error"},
		{"/v1/responses", `{"model":"m1","input":"x","max_output_tokens":"many"}`, 400, false, "invalid_request_error"},
		{"/v1/responses", `{"model":`, 400, false, "invalid_request_error"},
		{"/v1/responses", big, 413, false, "invalid_request_error"},
		{"/v1/messages", `{"model":"m1","messages":"hi","max_tokens":4}`, 400, true, "invalid_request_error"},
		{"/v1/messages", `{"model":"m1","messages":[],"system":5}`, 400, true, "invalid_request_error"},
		{"/v1/messages", `not json`, 400, true, "invalid_request_error"},
		{"/v1/messages", big, 413, true, "request_too_large"},
		{"/v1/messages/count_tokens", `{"model":"m1","messages":{}}`, 400, true, "invalid_request_error"},
		{"/v1/messages/count_tokens", big, 413, true, "request_too_large"},
	} {
		st, _, b := doJSON(t, http.MethodPost, gw.URL+c.path, c.body)
		if st != c.status {
			t.Errorf("%s %.40s: status %d, want %d: %s", c.path, c.body, st, c.status, b)
			continue
		}
		if c.anthropic {
			var e struct {
				Type  string
				Error struct{ Type, Message string }
			}
			if json.Unmarshal(b, &e) != nil || e.Type != "error" || e.Error.Type != c.errType || e.Error.Message == "" {
				t.Errorf("%s: not Anthropic's error shape: %s", c.path, b)
			}
			continue
		}
		var e struct {
			Error struct{ Type, Code, Message string }
		}
		if json.Unmarshal(b, &e) != nil || e.Error.Type != c.errType || e.Error.Message == "" {
			t.Errorf("%s: not OpenAI's error shape: %s", c.path, b)
		}
	}
}

// TestResponseOwners: follow-ups reach the backend that made the response,
// also through another replica sharing the store; 409 when that backend is
// not available.
func TestResponseOwners(t *testing.T) {
	urlA, urlB := startSimSeed(t, "m1", 1), startSimSeed(t, "m1", 2)
	backends := []config.Backend{backend("a", urlA, "m1"), backend("b", urlB, "m1")}
	store := state.NewMemory()
	shared := func(o *Options) { o.SharedStore = store }
	gw1 := startGateway(t, backends, nil, shared)
	gw2 := startGateway(t, backends, nil, shared)

	made := map[string]string{} // id → backend
	for i := range 12 {
		body := `{"model":"m1","input":"question ` + string(rune('a'+i)) + `","max_output_tokens":3`
		if i%2 == 1 {
			body += `,"stream":true`
		}
		st, h, b := doJSON(t, http.MethodPost, gw1.URL+"/v1/responses", body+"}")
		if st != 200 {
			t.Fatalf("create: %d %s", st, b)
		}
		id := ""
		if i%2 == 0 {
			var r struct{ ID string }
			json.Unmarshal(b, &r)
			id = r.ID
		} else if j := strings.Index(string(b), `"id":"resp_`); j >= 0 {
			id = string(b[j+6 : j+6+strings.IndexByte(string(b[j+6:]), '"')])
		}
		if id == "" {
			t.Fatalf("no id in %s", b)
		}
		made[id] = h.Get("X-Vigil-Backend")
	}
	seen := map[string]bool{}
	for id, owner := range made {
		seen[owner] = true
		for _, gw := range []*testGateway{gw1, gw2} {
			st, h, b := doJSON(t, http.MethodGet, gw.URL+"/v1/responses/"+id, "")
			if st != 200 || h.Get("X-Vigil-Backend") != owner {
				t.Errorf("GET %s: %d from %q, want 200 from %q: %s", id, st, h.Get("X-Vigil-Backend"), owner, b)
			}
			st, h, b = doJSON(t, http.MethodPost, gw.URL+"/v1/responses", `{"model":"m1","input":"more","max_output_tokens":2,"previous_response_id":"`+id+`"}`)
			if st != 200 || h.Get("X-Vigil-Backend") != owner {
				t.Errorf("follow-up of %s: %d from %q, want 200 from %q: %s", id, st, h.Get("X-Vigil-Backend"), owner, b)
			}
		}
	}
	if len(seen) != 2 {
		t.Logf("all responses made by %v", seen) // the balancer chose; the routing was still checked
	}

	t.Run("conversation sticks", func(t *testing.T) {
		var first string
		for i := range 4 {
			st, h, b := doJSON(t, http.MethodPost, gw1.URL+"/v1/responses", `{"model":"m1","input":"hi","max_output_tokens":2,"conversation":{"id":"conv_1"}}`)
			if st != 200 {
				t.Fatalf("%d %s", st, b)
			}
			if i == 0 {
				first = h.Get("X-Vigil-Backend")
			} else if got := h.Get("X-Vigil-Backend"); got != first {
				t.Errorf("conversation moved from %s to %s", first, got)
			}
		}
	})

	t.Run("owner down", func(t *testing.T) {
		for id, owner := range made {
			for _, b := range gw2.Pool().Backends() {
				if b.Name == owner {
					b.SetHealthy(false)
					defer b.SetHealthy(true)
				}
			}
			st, _, b := doJSON(t, http.MethodGet, gw2.URL+"/v1/responses/"+id, "")
			var e struct {
				Error struct{ Code, Message string }
			}
			if st != http.StatusConflict || json.Unmarshal(b, &e) != nil || e.Error.Code != "response_backend_unavailable" ||
				!strings.Contains(e.Error.Message, id) || !strings.Contains(e.Error.Message, owner) {
				t.Errorf("GET %s with %s down: %d %s", id, owner, st, b)
			}
			break
		}
	})
}

// fakeStream serves on n one SSE body of events ("type" → data) for every
// request; broken: the stream is cut after them.
func fakeStream(t *testing.T, n *testutil.Network, events [][2]string, broken bool) string {
	t.Helper()
	return n.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			// A backend's pace on the bubble's clock: each event a
			// millisecond after the one before (the first after the
			// request), so that the TTFT and every gap have a length.
			time.Sleep(time.Millisecond)
			io.WriteString(w, "event: "+e[0]+"\ndata: "+e[1]+"\n\n")
			w.(http.Flusher).Flush()
		}
		if broken {
			panic(http.ErrAbortHandler)
		}
	}))
}

// TestAPICountedUsage: streams without usage (cut short, or a backend that
// sends none) are counted from their content deltas, with their gaps; a
// broken stream ends with the API's own error event.
func TestAPICountedUsage(t *testing.T) {
	respEvents := [][2]string{
		{"response.created", `{"type":"response.created","response":{"id":"resp_fake1","model":"m1","status":"in_progress"}}`},
		{"response.output_text.delta", `{"type":"response.output_text.delta","delta":"Hel"}`},
		{"response.output_text.delta", `{"type":"response.output_text.delta","delta":""}`},
		{"response.output_text.delta", `{"type":"response.output_text.delta","delta":"lo"}`},
		{"response.output_text.delta", `{"delta":"\u0021","type":"response.output_text.delta"}`},
	}
	msgEvents := [][2]string{
		{"message_start", `{"type":"message_start","message":{"id":"msg_1","model":"m1","usage":{"input_tokens":9,"output_tokens":1}}}`},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`},
		{"content_block_delta", `{"index":0,"delta":{"text":" there","type":"text_delta"},"type":"content_block_delta"}`},
	}
	for _, c := range []struct {
		name, path, body string
		events           [][2]string
		broken           bool
		prompt, tokens   int
		errEvent         string
	}{
		{"responses", "/v1/responses", `{"model":"m1","input":"x","stream":true}`, respEvents, false, 0, 3, ""},
		{"responses broken", "/v1/responses", `{"model":"m1","input":"x","stream":true}`, respEvents, true, 0, 3,
			"event: error\ndata: {\"type\":\"error\",\"code\":\"upstream_stream_broken\",\"message\":"},
		{"messages", "/v1/messages", `{"model":"m1","messages":[],"max_tokens":5,"stream":true}`, msgEvents, false, 9, 2, ""},
		{"messages broken", "/v1/messages", `{"model":"m1","messages":[],"max_tokens":5,"stream":true}`, msgEvents, true, 9, 2,
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := &testutil.Network{}
				gw := startGatewayIn(t, n, []config.Backend{backend("a", fakeStream(t, n, c.events, c.broken), "m1")}, nil)
				_, h, b := gw.post(t, c.path, c.body)
				var want strings.Builder
				for _, e := range c.events {
					want.WriteString("event: " + e[0] + "\ndata: " + e[1] + "\n\n")
				}
				if !strings.HasPrefix(string(b), want.String()) {
					t.Errorf("body %q, want the backend's events first", b)
				}
				if rest := string(b[min(len(b), want.Len()):]); c.errEvent == "" && rest != "" || c.errEvent != "" && !strings.HasPrefix(rest, c.errEvent) {
					t.Errorf("after the events: %q, want %q…", rest, c.errEvent)
				}
				line := accessLine(t, gw, h.Get("X-Request-Id"))
				wantUsage(t, line, c.prompt, c.tokens, "counted")
				if line["ttft_ms"] == float64(0) || line["itl_p50_ms"] == nil {
					t.Errorf("access log %v", line)
				}
			})
		})
	}
}

func TestScanAPIEvent(t *testing.T) {
	for _, c := range []struct {
		doc     string
		typ     string
		content bool
	}{
		{`{"type":"response.output_text.delta","delta":"a"}`, "response.output_text.delta", true},
		{`{"type":"response.output_text.delta","delta":""}`, "response.output_text.delta", false},
		{`{"delta":{"type":"text_delta","text":"x"},"type":"content_block_delta"}`, "content_block_delta", true},
		{`{"type":"content_block_delta","delta":{"type":"input_json_delta","partial_json":""}}`, "content_block_delta", false},
		{`{"type":"ping"}`, "", false},
	} {
		typ, content, ok := scanAPIEvent([]byte(c.doc))
		if !ok || typ != c.typ || content != c.content {
			t.Errorf("scanAPIEvent(%s) = %q %v %v", c.doc, typ, content, ok)
		}
	}
	if _, _, ok := scanAPIEvent([]byte(`{"type":"a\u0062"}`)); ok {
		t.Error("an escaped type must go to encoding/json")
	}
	if got := rootID([]byte(`{"id":"resp_1","output":[{"id":"x"`)); got != "resp_1" {
		t.Errorf("rootID of a cut body = %q", got)
	}
	if got := rootID([]byte(`{"object":"response","usage":{"id":"no"},"id":"resp_2"}`)); got != "resp_2" {
		t.Errorf("rootID = %q", got)
	}
}

// TestAPISpans: the inference spans of both APIs carry the GenAI
// attributes: operation "chat" (the semantic conventions' name for both),
// the provider, the request's token cap, the response's id and usage.
func TestAPISpans(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	for _, c := range []struct{ path, body, idPrefix string }{
		{"/v1/responses", `{"model":"m1","input":"hi","max_output_tokens":5}`, "resp_"},
		{"/v1/responses", `{"model":"m1","input":"hi","max_output_tokens":5,"stream":true}`, "resp_"},
		{"/v1/messages", `{"model":"m1","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "msg_"},
		{"/v1/messages", `{"model":"m1","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "msg_"},
	} {
		gw, rcv, p := tracedGateway(t, []config.Backend{backend("a", url, "m1")}, nil)
		if st, _, b := post(t, gw.URL+c.path, c.body); st != 200 {
			t.Fatalf("%s: %d %s", c.path, st, b)
		}
		p.Shutdown(context.Background())
		inf := byName(rcv.WaitFor(t, 3, 5*time.Second))["chat m1"]
		want := map[string]any{
			"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "m1",
			"gen_ai.response.model": "m1", "gen_ai.usage.output_tokens": int64(5), "gen_ai.request.max_tokens": int64(5),
		}
		for k, v := range want {
			if inf.Attributes[k] != v {
				t.Errorf("%s %s: inference %s = %#v, want %#v", c.path, c.body, k, inf.Attributes[k], v)
			}
		}
		if id, _ := inf.Attributes["gen_ai.response.id"].(string); !strings.HasPrefix(id, c.idPrefix) {
			t.Errorf("%s: gen_ai.response.id %q", c.path, id)
		}
		if in, _ := inf.Attributes["gen_ai.usage.input_tokens"].(int64); in <= 0 {
			t.Errorf("%s: gen_ai.usage.input_tokens %v", c.path, inf.Attributes["gen_ai.usage.input_tokens"])
		}
	}
}

// TestAPINoBackend: the gateway's 503 on the Messages API is Anthropic's
// overloaded_error, on the Responses API OpenAI's shape.
func TestAPINoBackend(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, nil)
	gw.Pool().Backends()[0].SetHealthy(false)
	st, _, b := doJSON(t, http.MethodPost, gw.URL+"/v1/messages", `{"model":"m1","max_tokens":4,"messages":[]}`)
	if st != http.StatusServiceUnavailable || !strings.Contains(string(b), `"type":"error","error":{"type":"overloaded_error"`) {
		t.Errorf("messages: %d %s", st, b)
	}
	st, _, b = doJSON(t, http.MethodPost, gw.URL+"/v1/responses", `{"model":"m1","input":"x"}`)
	if st != http.StatusServiceUnavailable || !strings.Contains(string(b), `"code":"no_healthy_backend"`) {
		t.Errorf("responses: %d %s", st, b)
	}
}

func TestOwnersLRU(t *testing.T) {
	o := newOwners(config.Responses{OwnerTTL: time.Hour, MaxOwners: 2, LookupTimeout: time.Second}, nil, nil)
	o.record("a", "x")
	o.record("b", "y")
	if _, ok, _ := o.lookup(context.Background(), "a"); !ok { // a is now the most recent
		t.Fatal("a missing")
	}
	o.record("c", "z") // evicts b
	if _, ok, _ := o.lookup(context.Background(), "b"); ok {
		t.Error("b outlived the bound")
	}
	if be, ok, _ := o.lookup(context.Background(), "c"); !ok || be != "z" {
		t.Errorf("c = %q %v", be, ok)
	}
	o.put("d", "w", time.Now().Add(-time.Second))
	if _, ok, _ := o.lookup(context.Background(), "d"); ok {
		t.Error("an expired owner was found")
	}
	// The shared store answers for what this process did not record.
	store := state.NewMemory()
	store.Set(context.Background(), responseKey("r1"), []byte("b2"), time.Hour)
	o2 := newOwners(config.DefaultResponses(), store, nil)
	if be, ok, err := o2.lookup(context.Background(), responseKey("r1")); !ok || err != nil || be != "b2" {
		t.Errorf("from the store: %q %v %v", be, ok, err)
	}
}

// TestAPIBrokenStreamSDKs: the error event ending a broken stream is what
// each SDK understands: openai-go hands the Responses error event to the
// caller, anthropic-sdk-go raises it.
func TestAPIBrokenStreamSDKs(t *testing.T) {
	ctx := context.Background()
	t.Run("responses", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := &testutil.Network{}
			url := fakeStream(t, n, [][2]string{
				{"response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_b","model":"m1","status":"in_progress"}}`},
				{"response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":1,"delta":"Hel"}`},
			}, true)
			gw := startGatewayIn(t, n, []config.Backend{backend("a", url, "m1")}, nil)
			client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0),
				option.WithHTTPClient(gw.hc))
			stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "m1",
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")}})
			defer stream.Close()
			var got *responses.ResponseErrorEvent
			for stream.Next() {
				if ev, ok := stream.Current().AsAny().(responses.ResponseErrorEvent); ok {
					got = &ev
				}
			}
			if got == nil || got.Code != "upstream_stream_broken" || !strings.Contains(got.Message, `backend a`) {
				t.Errorf("error event %+v, err %v", got, stream.Err())
			}
		})
	})
	t.Run("messages", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := &testutil.Network{}
			url := fakeStream(t, n, [][2]string{
				{"message_start", `{"type":"message_start","message":{"id":"msg_b","type":"message","role":"assistant","model":"m1","content":[],"usage":{"input_tokens":3,"output_tokens":0}}}`},
			}, true)
			gw := startGatewayIn(t, n, []config.Backend{backend("a", url, "m1")}, nil)
			client := anthropic.NewClient(anthropicoption.WithBaseURL(gw.URL), anthropicoption.WithAPIKey("unused"), anthropicoption.WithMaxRetries(0),
				anthropicoption.WithHTTPClient(gw.hc))
			stream := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "m1", MaxTokens: 4,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("x"))}})
			defer stream.Close()
			for stream.Next() {
			}
			if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "api_error") {
				t.Errorf("stream error %v, want the api_error event raised", err)
			}
		})
	})
}
