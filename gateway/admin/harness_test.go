package admin

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/gateway/balance"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// startAPI serves an API over one backend (never called: what the admin
// routes show of it is the pool's and the balancer's), as the gateway
// registers it, with o's token, profiles and sources.
func startAPI(t testing.TB, o Options) *httptest.Server {
	t.Helper()
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "a", URL: "http://127.0.0.1:9", Kind: "openai", Models: []string{"m"}, Weight: 100}}
	pool, err := upstream.NewPool(cfg.Backends, cfg.Health, cfg.Balancer.LatencyDecay)
	if err != nil {
		t.Fatal(err)
	}
	o.Pool = pool
	o.Balancer, err = balance.New(pool, balance.Options{
		Strategy: cfg.Balancer.Strategy, Prefix: cfg.Balancer.Prefix, Weights: cfg.Balancer.LoadWeights,
		QueueSaturation: cfg.Balancer.QueueSaturation, StaleAfter: cfg.Balancer.StaleAfter,
		Floor: cfg.Balancer.Floor,
	})
	if err != nil {
		t.Fatal(err)
	}
	o.StaleAfter = cfg.Balancer.StaleAfter
	srv := httptest.NewServer(handler(o))
	t.Cleanup(srv.Close)
	return srv
}

// handler is the API of o on an engine of its own.
func handler(o Options) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	New(o).Register(e)
	return e
}
