package gateway

import (
	"context"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/vigil-gw/vigil/config"
)

// TestOpenAISDK drives Vigil with the official OpenAI Go SDK, changing only
// the base URL, streaming and not.
func TestOpenAISDK(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, nil)
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:       "m1",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")},
		MaxTokens:   openai.Int(8),
		Logprobs:    openai.Bool(true),
		TopLogprobs: openai.Int(2),
	}

	t.Run("non-streaming", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) != 1 || c.Choices[0].Message.Content == "" || c.Usage.CompletionTokens != 8 {
			t.Errorf("completion: %+v", c)
		}
		if n := len(c.Choices[0].Logprobs.Content); n != 8 {
			t.Errorf("got %d logprob entries, want 8", n)
		}
	})
	t.Run("streaming", func(t *testing.T) {
		p := params
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := client.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks < 8 || acc.Choices[0].Message.Content == "" || acc.Usage.CompletionTokens != 8 {
			t.Errorf("%d chunks, accumulated %+v", chunks, acc.ChatCompletion)
		}
	})
	t.Run("error", func(t *testing.T) {
		p := params
		p.Model = "unknown"
		_, err := client.Chat.Completions.New(ctx, p)
		apiErr, ok := err.(*openai.Error)
		if !ok || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
			t.Errorf("error = %v, want a 404 model_not_found the SDK understands", err)
		}
	})
}
