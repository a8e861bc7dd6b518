package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/apierror"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// listModels answers GET /v1/models with the union of the healthy
// backends' model lists, in backend order, first occurrence winning.
func (s *Server) listModels(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 5*time.Second)
	defer cancel()
	backends := slices.DeleteFunc(slices.Clone(s.pool.Backends()), func(b *upstream.Backend) bool { return !b.Healthy() })
	if len(backends) == 0 {
		apierror.Write(c.Writer, pickError(upstream.ErrNoHealthy, "", nil))
		return
	}
	lists := make([][]json.RawMessage, len(backends))
	var wg sync.WaitGroup
	for i, b := range backends {
		wg.Go(func() { lists[i] = s.fetchModels(ctx, b) })
	}
	wg.Wait()
	seen := map[string]bool{}
	data := []json.RawMessage{}
	answered := false
	for _, l := range lists {
		if l != nil {
			answered = true
		}
		for _, m := range l {
			var id struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(m, &id) != nil || seen[id.ID] {
				continue
			}
			seen[id.ID] = true
			data = append(data, m)
		}
	}
	if !answered {
		apierror.Write(c.Writer, apierror.New(http.StatusBadGateway, "upstream_error", "upstream_unavailable", "no backend answered its model list", exchange.ClassUpstream5xx))
		return
	}
	c.JSON(http.StatusOK, gin.H{"object": "list", "data": data})
}

// fetchModels returns a backend's model objects, nil when it did not answer.
// Models outside a backend's configured list are left out.
func (s *Server) fetchModels(ctx context.Context, b *upstream.Backend) []json.RawMessage {
	get := func(path string) ([]byte, bool) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL.JoinPath(path).String(), nil)
		if err != nil {
			return nil, false
		}
		resp, err := s.client.Do(req)
		if err != nil {
			return nil, false
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		return body, err == nil && resp.StatusCode == http.StatusOK
	}
	if body, ok := get("/v1/models"); ok {
		var l struct {
			Data []json.RawMessage `json:"data"`
		}
		if json.Unmarshal(body, &l) == nil {
			return slices.DeleteFunc(l.Data, func(m json.RawMessage) bool {
				var id struct {
					ID string `json:"id"`
				}
				return json.Unmarshal(m, &id) != nil || !b.Serves(id.ID)
			})
		}
	}
	if b.Kind == upstream.KindTGI { // older TGI has only /info
		if body, ok := get("/info"); ok {
			var info struct {
				ModelID string `json:"model_id"`
			}
			if json.Unmarshal(body, &info) == nil && info.ModelID != "" {
				m, _ := json.Marshal(gin.H{"id": info.ModelID, "object": "model", "owned_by": b.Name})
				return []json.RawMessage{m}
			}
		}
	}
	return nil
}
