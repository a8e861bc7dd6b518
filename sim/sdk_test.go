package sim

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestOpenAISDK drives the simulator with the official OpenAI Go SDK, the
// client Vigil's users point at the gateway.
func TestOpenAISDK(t *testing.T) {
	_, ts := newTestServer(t, DefaultKnobs())
	client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1"), option.WithAPIKey("sim"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:       "sim-model",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is a gateway?")},
		MaxTokens:   openai.Int(6),
		Logprobs:    openai.Bool(true),
		TopLogprobs: openai.Int(2),
	}

	t.Run("chat", func(t *testing.T) {
		resp, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		c := resp.Choices[0]
		if c.Message.Content == "" || c.FinishReason != "length" || len(c.Logprobs.Content) != 6 || len(c.Logprobs.Content[0].TopLogprobs) != 2 {
			t.Errorf("choice %+v", c)
		}
		if resp.Usage.PromptTokens != 5 || resp.Usage.CompletionTokens != 6 || resp.Usage.TotalTokens != 11 {
			t.Errorf("usage %+v", resp.Usage)
		}
	})

	t.Run("streaming chat", func(t *testing.T) {
		p := params
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := client.Chat.Completions.NewStreaming(ctx, p)
		defer stream.Close()
		acc := openai.ChatCompletionAccumulator{}
		var text strings.Builder
		logprobs := 0
		for stream.Next() {
			chunk := stream.Current()
			acc.AddChunk(chunk)
			for _, c := range chunk.Choices {
				text.WriteString(c.Delta.Content)
				logprobs += len(c.Logprobs.Content)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if logprobs != 6 {
			t.Errorf("%d logprob entries, want 6", logprobs)
		}
		if acc.Usage.CompletionTokens != 6 {
			t.Errorf("accumulated usage %+v", acc.Usage)
		}
		plain, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if text.String() != plain.Choices[0].Message.Content {
			t.Errorf("streamed %q, non-streaming %q", text.String(), plain.Choices[0].Message.Content)
		}
	})

	t.Run("embeddings", func(t *testing.T) {
		resp, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
			Model: "sim-model",
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Data) != 2 || len(resp.Data[1].Embedding) != embeddingDim {
			t.Errorf("embeddings %+v", resp.Data)
		}
	})

	t.Run("error", func(t *testing.T) {
		p := params
		p.Model = "other"
		_, err := client.Chat.Completions.New(ctx, p)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Message != "The model `other` does not exist." {
			t.Errorf("error %v", err)
		}
	})
}
