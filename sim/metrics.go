package sim

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
)

// kvCacheTokens is the simulated KV cache capacity in tokens: the
// denominator of vllm:kv_cache_usage_perc.
const kvCacheTokens = 1 << 15

// handleMetrics writes the Prometheus text format by hand: a handful of
// series with one bounded label does not need a registry, and the names
// are vLLM's (vllm:*, label model_name) so scrapers written for vLLM read
// the simulator unchanged.
func (s *Server) handleMetrics(w http.ResponseWriter, _ *http.Request) {
	var b bytes.Buffer
	model := `model_name="` + escapeLabel(s.model) + `"`
	metric := func(name, typ, help string, series ...string) {
		b.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n")
		for _, sr := range series {
			b.WriteString(name + sr + "\n")
		}
	}
	val := func(labels string, v int64) string { return "{" + labels + "} " + strconv.FormatInt(v, 10) }
	fval := func(labels string, v float64) string {
		return "{" + labels + "} " + strconv.FormatFloat(v, 'g', -1, 64)
	}
	kv := min(max(float64(s.kvTokens.Load())/kvCacheTokens, 0), 1)
	k := s.knobs.Load()
	// The prefix cache's blocks and the running requests' tokens share the
	// one KV cache, and a running request's prompt blocks are cache
	// blocks too: the larger of the two shares counts them once.
	kv = max(kv, s.cache.usage())
	if k.KVCacheUsage > 0 {
		kv = k.KVCacheUsage
	}

	metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", val(model, s.running.Load()))
	metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", val(model, s.waiting.Load()+int64(k.ExtraWaiting)))
	metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", fval(model, kv))
	metric("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage. Older name of vllm:kv_cache_usage_perc.", fval(model, kv))
	metric("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.", val(model, s.cache.queries.Load()))
	metric("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", val(model, s.cache.hits.Load()))
	metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", val(model, s.promptTokens.Load()))
	metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", val(model, s.generationTokens.Load()))
	metric("vllm:request_success_total", "counter", "Count of successfully processed requests.",
		val(`finished_reason="length",`+model, s.finishedLength.Load()),
		val(`finished_reason="stop",`+model, s.finishedStop.Load()))
	metric("vigil_sim_requests_total", "counter", "Requests received on the inference routes.", val(model, s.requests.Load()))
	metric("vigil_sim_request_errors_total", "counter", "Requests answered with an error status.", val(model, s.errors.Load()))
	metric("vigil_sim_requests_cancelled_total", "counter", "Requests whose client went away before the end.", val(model, s.cancelled.Load()))

	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write(b.Bytes())
}

// escapeLabel escapes a label value for the text format.
func escapeLabel(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}
