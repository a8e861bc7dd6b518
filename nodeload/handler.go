package nodeload

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxOverrideBody bounds a PUT /v1/load body; the real one is a few dozen bytes.
const maxOverrideBody = 4 << 10

// Handler serves s over HTTP, as `vigil agent` does:
//
//	GET    /v1/load   the current Load as JSON; 503 before the first sample
//	GET    /metrics   Prometheus text (see Sampler.Collector)
//	GET    /healthz   200 while the process serves
//	PUT    /v1/load   testing aid: pin values, body {"cpu":0.5,"mem":0.2,"gpu":0.9,"gpu_mem":0.4}
//	                  (any subset, each in [0,1]; replaces any earlier pin); answers the resulting Load
//	DELETE /v1/load   testing aid: clear the pinned values; 204
//
// PUT and DELETE answer 403 unless allowOverride is set, so that a production
// agent's load cannot be faked from the network. Errors are JSON
// {"error": "..."}. The handler registers s.Collector in a registry of its
// own; call Handler once per Sampler.
func Handler(s *Sampler, allowOverride bool) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collector())
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /v1/load", func(w http.ResponseWriter, _ *http.Request) {
		l := s.Load()
		if l.Time.IsZero() {
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "no sample yet")
			return
		}
		writeJSON(w, http.StatusOK, l)
	})
	mux.HandleFunc("PUT /v1/load", func(w http.ResponseWriter, r *http.Request) {
		if !allowOverride {
			writeError(w, http.StatusForbidden, "load override is disabled; start the agent with --allow-override")
			return
		}
		var o Override
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxOverrideBody))
		dec.DisallowUnknownFields() // a typo must not silently pin nothing
		if err := dec.Decode(&o); err != nil {
			status := http.StatusBadRequest
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				status = http.StatusRequestEntityTooLarge
			}
			writeError(w, status, fmt.Sprintf("bad override body: %v", err))
			return
		}
		if o == (Override{}) {
			writeError(w, http.StatusBadRequest, "bad override body: set at least one of cpu, mem, gpu, gpu_mem")
			return
		}
		if err := s.SetOverride(&o); err != nil {
			writeError(w, http.StatusBadRequest, "bad override body: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, s.Load())
	})
	mux.HandleFunc("DELETE /v1/load", func(w http.ResponseWriter, _ *http.Request) {
		if !allowOverride {
			writeError(w, http.StatusForbidden, "load override is disabled; start the agent with --allow-override")
			return
		}
		s.SetOverride(nil)
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
