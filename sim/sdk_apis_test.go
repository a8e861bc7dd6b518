package sim

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestResponsesSDK drives the Responses API with the official OpenAI Go
// SDK: plain, streaming, the stored-response routes and the 404 of an
// unknown previous_response_id.
func TestResponsesSDK(t *testing.T) {
	_, ts := newTestServer(t, fastKnobs())
	client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1"), option.WithAPIKey("sim"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := responses.ResponseNewParams{
		Model:           "sim-model",
		Instructions:    openai.String("Be brief."),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("What is a gateway?")},
		MaxOutputTokens: openai.Int(6),
		Include:         []responses.ResponseIncludable{responses.ResponseIncludableMessageOutputTextLogprobs},
		TopLogprobs:     openai.Int(2),
	}
	resp, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != "completed" || resp.OutputText() == "" || resp.Usage.InputTokens != 7 || resp.Usage.OutputTokens != 6 || resp.Usage.TotalTokens != 13 {
		t.Errorf("response %s", resp.RawJSON())
	}
	if lp := resp.Output[0].Content[0].Logprobs; len(lp) != 6 || len(lp[0].TopLogprobs) != 2 {
		t.Errorf("logprobs %+v", lp)
	}

	t.Run("streaming", func(t *testing.T) {
		stream := client.Responses.NewStreaming(ctx, params)
		defer stream.Close()
		var text strings.Builder
		var types []string
		var done responses.Response
		for stream.Next() {
			ev := stream.Current()
			if ev.SequenceNumber != int64(len(types)) {
				t.Errorf("event %d has sequence_number %d", len(types), ev.SequenceNumber)
			}
			types = append(types, ev.Type)
			switch ev := ev.AsAny().(type) {
			case responses.ResponseTextDeltaEvent:
				text.WriteString(ev.Delta)
				if len(ev.Logprobs) != 1 || len(ev.Logprobs[0].TopLogprobs) != 2 {
					t.Errorf("delta logprobs %+v", ev.Logprobs)
				}
			case responses.ResponseCompletedEvent:
				done = ev.Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(types) != 14 || types[0] != "response.created" || types[13] != "response.completed" {
			t.Errorf("events %v", types)
		}
		if text.String() != resp.OutputText() || done.OutputText() != resp.OutputText() || done.Usage.OutputTokens != 6 || !strings.HasPrefix(done.ID, "resp_") {
			t.Errorf("streamed %q, completed %s; plain %q", text.String(), done.RawJSON(), resp.OutputText())
		}
	})

	t.Run("stored", func(t *testing.T) {
		got, err := client.Responses.Get(ctx, resp.ID, responses.ResponseGetParams{})
		if err != nil || got.OutputText() != resp.OutputText() {
			t.Fatalf("get: %v %v", got, err)
		}
		items, err := client.Responses.InputItems.List(ctx, resp.ID, responses.InputItemListParams{})
		if err != nil || len(items.Data) != 1 || items.Data[0].Type != "message" || items.Data[0].Role != "user" {
			t.Fatalf("input items: %v %v", items, err)
		}
		p := params
		p.PreviousResponseID = openai.String(resp.ID)
		p.Input = responses.ResponseNewParamsInputUnion{OfString: openai.String("More.")}
		next, err := client.Responses.New(ctx, p)
		if err != nil || next.PreviousResponseID != resp.ID {
			t.Fatalf("follow-up: %v %v", next, err)
		}
		var apiErr *openai.Error
		if _, err := client.Responses.Cancel(ctx, resp.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest {
			t.Errorf("cancel: %v", err)
		}
		if err := client.Responses.Delete(ctx, resp.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Responses.Get(ctx, resp.ID, responses.ResponseGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
			t.Errorf("get after delete: %v", err)
		}
	})

	t.Run("unknown previous response", func(t *testing.T) {
		p := params
		p.PreviousResponseID = openai.String("resp_elsewhere")
		_, err := client.Responses.New(ctx, p)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Param != "previous_response_id" ||
			apiErr.Message != "Response with id 'resp_elsewhere' not found." {
			t.Errorf("error %v", err)
		}
	})
}

// TestAnthropicSDK drives the Messages API with Anthropic's official Go SDK,
// its base URL the simulator's without /v1.
func TestAnthropicSDK(t *testing.T) {
	_, ts := newTestServer(t, fastKnobs())
	client := anthropic.NewClient(anthropicoption.WithBaseURL(ts.URL), anthropicoption.WithAPIKey("sim"), anthropicoption.WithMaxRetries(0))
	ctx := context.Background()
	params := anthropic.MessageNewParams{
		Model:     "sim-model",
		MaxTokens: 6,
		System:    []anthropic.TextBlockParam{{Text: "Be brief."}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What is a gateway?"))},
	}
	msg, err := client.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text == "" || msg.StopReason != anthropic.StopReasonMaxTokens ||
		msg.Usage.InputTokens != 7 || msg.Usage.OutputTokens != 6 {
		t.Errorf("message %s", msg.RawJSON())
	}

	t.Run("streaming", func(t *testing.T) {
		stream := client.Messages.NewStreaming(ctx, params)
		defer stream.Close()
		var acc anthropic.Message
		deltas := 0
		for stream.Next() {
			ev := stream.Current()
			if err := acc.Accumulate(ev); err != nil {
				t.Fatal(err)
			}
			if _, ok := ev.AsAny().(anthropic.ContentBlockDeltaEvent); ok {
				deltas++
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if deltas != 6 || acc.Content[0].Text != msg.Content[0].Text || acc.StopReason != anthropic.StopReasonMaxTokens ||
			acc.Usage.OutputTokens != 6 || acc.Usage.InputTokens != 7 || !strings.HasPrefix(acc.ID, "msg_") {
			t.Errorf("accumulated %s, %d deltas; plain %s", acc.RawJSON(), deltas, msg.RawJSON())
		}
	})

	t.Run("count tokens", func(t *testing.T) {
		n, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
			Model:    "sim-model",
			System:   anthropic.MessageCountTokensParamsSystemUnion{OfString: anthropic.String("Be brief.")},
			Messages: params.Messages,
		})
		if err != nil || n.InputTokens != 7 {
			t.Errorf("count tokens %v %v", n, err)
		}
	})

	t.Run("error", func(t *testing.T) {
		p := params
		p.Model = "other"
		_, err := client.Messages.New(ctx, p)
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || !strings.Contains(apiErr.Error(), "not_found_error") {
			t.Errorf("error %v", err)
		}
	})
}
