package balance

import (
	"math"

	"github.com/vigil-gw/vigil/gateway/upstream"
)

// Signal names a load signal; its value indexes State.Scores.
type Signal int

// The load signals, in the order of balancer.load_weights.
const (
	CPU Signal = iota
	Mem
	GPU
	GPUMem
	Queue
	KVCache
	Latency
	Errors
	NumSignals
)

var signalNames = [NumSignals]string{"cpu", "mem", "gpu", "gpu_mem", "queue", "kv_cache", "latency", "errors"}

// String returns the signal's config and JSON name, e.g. "gpu_mem".
func (s Signal) String() string {
	if s < 0 || s >= NumSignals {
		return "unknown"
	}
	return signalNames[s]
}

// A View is what the scorers see of one backend at one update: only fresh
// signals are set (stale or unknown ones are nil or NaN).
type View struct {
	Backend *upstream.Backend
	// Agent is the node's load; nil when unknown or stale.
	Agent *upstream.AgentLoad
	// Server is the server's metrics; nil when unknown or stale.
	Server *upstream.ServerLoad
	// Latency is the backend's time-to-first-byte EWMA in seconds and
	// BestLatency the lowest among the backends; NaN and 0 when unknown.
	Latency, BestLatency float64
	// ErrorRate is the EWMA of the share of failed attempts; NaN when unknown.
	ErrorRate float64
	// QueueSaturation is balancer.queue_saturation.
	QueueSaturation float64
}

// A Scorer rates one load signal of a backend in [0, 1]: 0 idle, 1
// saturated. ok is false when the signal is unknown or stale.
type Scorer interface {
	Signal() Signal
	Score(v *View) (score float64, ok bool)
}

var (
	_ Scorer = cpuScorer{}
	_ Scorer = memScorer{}
	_ Scorer = gpuScorer{}
	_ Scorer = gpuMemScorer{}
	_ Scorer = queueScorer{}
	_ Scorer = kvCacheScorer{}
	_ Scorer = latencyScorer{}
	_ Scorer = errorScorer{}
)

func known(v float64) (float64, bool) { return v, !math.IsNaN(v) }

// agentScore reads one agent value.
func agentScore(v *View, f func(*upstream.AgentLoad) float64) (float64, bool) {
	if v.Agent == nil {
		return 0, false
	}
	return known(f(v.Agent))
}

// cpuScorer: the node's CPU utilization.
type cpuScorer struct{}

func (cpuScorer) Signal() Signal { return CPU }
func (cpuScorer) Score(v *View) (float64, bool) {
	return agentScore(v, func(l *upstream.AgentLoad) float64 { return l.CPU })
}

// memScorer: the node's memory use.
type memScorer struct{}

func (memScorer) Signal() Signal { return Mem }
func (memScorer) Score(v *View) (float64, bool) {
	return agentScore(v, func(l *upstream.AgentLoad) float64 { return l.Mem })
}

// gpuScorer: GPU utilization (the agent's aggregate over the node's GPUs).
type gpuScorer struct{}

func (gpuScorer) Signal() Signal { return GPU }
func (gpuScorer) Score(v *View) (float64, bool) {
	return agentScore(v, func(l *upstream.AgentLoad) float64 { return l.GPU })
}

// gpuMemScorer: GPU memory use.
type gpuMemScorer struct{}

func (gpuMemScorer) Signal() Signal { return GPUMem }
func (gpuMemScorer) Score(v *View) (float64, bool) {
	return agentScore(v, func(l *upstream.AgentLoad) float64 { return l.GPUMem })
}

// queueScorer: waiting requests w, saturating as w / (w + K), K the
// configured queue saturation: 0 with an empty queue, 0.5 at K waiting,
// approaching 1 as the queue grows. Running requests are not counted:
// vLLM and TGI queue only once their batch is full, so waiting requests
// are the backlog a new request joins.
type queueScorer struct{}

func (queueScorer) Signal() Signal { return Queue }
func (queueScorer) Score(v *View) (float64, bool) {
	if v.Server == nil || math.IsNaN(v.Server.Waiting) {
		return 0, false
	}
	w := max(v.Server.Waiting, 0)
	return w / (w + v.QueueSaturation), true
}

// kvCacheScorer: the server's KV-cache usage.
type kvCacheScorer struct{}

func (kvCacheScorer) Signal() Signal { return KVCache }
func (kvCacheScorer) Score(v *View) (float64, bool) {
	if v.Server == nil {
		return 0, false
	}
	return known(v.Server.KVCache)
}

// latencyScorer: 1 − best/own over the time-to-first-byte EWMAs, so the
// fastest backend scores 0 and one twice as slow 0.5.
type latencyScorer struct{}

func (latencyScorer) Signal() Signal { return Latency }
func (latencyScorer) Score(v *View) (float64, bool) {
	switch {
	case math.IsNaN(v.Latency):
		return 0, false
	case v.Latency <= 0: // below the clock's resolution: the best there is
		return 0, true
	}
	return 1 - v.BestLatency/v.Latency, true
}

// errorScorer: the EWMA of the share of failed attempts.
type errorScorer struct{}

func (errorScorer) Signal() Signal                { return Errors }
func (errorScorer) Score(v *View) (float64, bool) { return known(v.ErrorRate) }
