package nodeload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vigil-gw/vigil/gpu"
)

// DefaultInterval is the sampling interval NewSampler uses for a
// non-positive one.
const DefaultInterval = time.Second

// An Option configures a Sampler.
type Option func(*Sampler)

// WithProcRoot reads stat and meminfo from dir instead of /proc; tests point
// it at fixtures.
func WithProcRoot(dir string) Option { return func(s *Sampler) { s.procRoot = dir } }

// WithoutGPU skips NVML: the Sampler reports no GPU even on a GPU node.
func WithoutGPU() Option { return func(s *Sampler) { s.openGPU = nil } }

// WithLogger logs, once per Run, which GPUs were found or why none were.
// Without it nothing is logged.
func WithLogger(l *slog.Logger) Option { return func(s *Sampler) { s.log = l } }

// A Sampler samples the node's load every interval while Run runs and
// publishes each sample as an immutable snapshot. Load, SetOverride and
// Collector are safe for concurrent use, and Load takes no lock; Run runs
// once at a time.
type Sampler struct {
	interval time.Duration
	procRoot string
	log      *slog.Logger
	openGPU  func() (gpu.Reader, error) // nil: no GPU; tests put a fake here
	now      func() time.Time

	cur     atomic.Pointer[Load]
	pin     atomic.Pointer[Override]
	running atomic.Bool

	// Owned by the goroutine that runs Run (or a test calling sample).
	gpu      gpu.Reader
	gpuErr   string // why opening the GPU library failed, when that is an error
	prevCPU  cpuTimes
	havePrev bool
}

// NewSampler returns a Sampler that samples every interval (DefaultInterval
// when interval ≤ 0) from /proc and, where NVML is available, the GPUs.
func NewSampler(interval time.Duration, opts ...Option) *Sampler {
	if interval <= 0 {
		interval = DefaultInterval
	}
	s := &Sampler{
		interval: interval,
		procRoot: "/proc",
		log:      slog.New(slog.DiscardHandler),
		openGPU:  gpu.Open,
		now:      time.Now,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Run opens NVML (when there is one), samples every interval until ctx is
// done, then shuts NVML down and returns nil. The first sample is published
// one interval after Run starts, since CPU utilization needs two readings;
// until then Load has a zero Time. Run returns an error at once if another
// Run of the same Sampler is in progress.
func (s *Sampler) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("nodeload: sampler already running")
	}
	defer s.running.Store(false)
	s.open()
	defer s.close()
	s.primeCPU()
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.sample()
		}
	}
}

// open opens the GPU library and logs what it found.
func (s *Sampler) open() {
	s.gpu, s.gpuErr = nil, ""
	if s.openGPU == nil {
		s.log.Info("gpu sampling disabled")
		return
	}
	r, err := s.openGPU()
	switch {
	case errors.Is(err, gpu.ErrNoGPU):
		// An ordinary node without a GPU: logged, never a Load error.
		s.log.Info("GPU sampling off: reporting CPU and memory only", "reason", err.Error())
	case err != nil:
		// A driver that is there but fails is worth an operator's look:
		// it goes into every Load's Err as well.
		s.gpuErr = err.Error()
		s.log.Warn("GPU library failed: reporting CPU and memory only", "err", err)
	default:
		s.gpu = r
		devs, _ := r.Read()
		names := make([]string, len(devs))
		for i, d := range devs {
			names[i] = d.Name
		}
		s.log.Info("sampling GPUs", "devices", len(devs), "names", names)
	}
}

func (s *Sampler) close() {
	if s.gpu != nil {
		s.gpu.Close()
		s.gpu = nil
	}
}

// primeCPU takes the first CPU reading, which the first sample's share is
// measured from.
func (s *Sampler) primeCPU() {
	if t, err := readCPU(s.procRoot); err == nil {
		s.prevCPU, s.havePrev = t, true
	}
}

// sample reads everything once, publishes the result and returns it.
func (s *Sampler) sample() *Load {
	l := &Load{Time: s.now().UTC()}
	prev := s.cur.Load()
	var errs []string
	if t, err := readCPU(s.procRoot); err != nil {
		errs = append(errs, "cpu: "+err.Error())
	} else {
		share, ok := 0.0, false
		if s.havePrev {
			share, ok = cpuShare(s.prevCPU, t)
		}
		switch {
		case ok:
			l.CPU = share
		case prev != nil: // no tick elapsed: the last share still stands
			l.CPU = prev.CPU
		}
		s.prevCPU, s.havePrev = t, true
	}
	if m, err := readMem(s.procRoot); err != nil {
		errs = append(errs, "mem: "+err.Error())
	} else {
		l.Mem = m
	}
	if s.gpuErr != "" {
		errs = append(errs, "gpu: "+s.gpuErr)
	}
	if s.gpu != nil {
		devs, err := s.gpu.Read()
		if err != nil {
			errs = append(errs, "gpu: "+err.Error())
		}
		l.GPUs = devs
		l.GPU, l.GPUMem, l.HasGPU = aggregate(devs)
	}
	l.Err = strings.Join(errs, "; ")
	s.cur.Store(l)
	return l
}

// aggregate returns the devices' mean utilization and the used share of
// their memory together; ok is false without devices.
func aggregate(devs []gpu.Device) (util, mem float64, ok bool) {
	if len(devs) == 0 {
		return 0, 0, false
	}
	var used, total float64
	for _, d := range devs {
		util += d.Util
		used += d.MemUsed
		total += d.MemTotal
	}
	util /= float64(len(devs))
	if total > 0 {
		mem = min(used/total, 1)
	}
	return util, mem, true
}

// Load returns the latest sample with any override applied. Before the
// first sample its Time is zero (unless an override is set). The returned
// GPUs slice is shared and must not be modified.
func (s *Sampler) Load() Load {
	var l Load
	if p := s.cur.Load(); p != nil {
		l = *p
	}
	if o := s.pin.Load(); o != nil {
		l = o.apply(l, s.now().UTC())
	}
	return l
}

// SetOverride pins the values set in o until SetOverride(nil) clears them
// (see Override). Each value must be in [0,1].
func (s *Sampler) SetOverride(o *Override) error {
	if o == nil {
		s.pin.Store(nil)
		return nil
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"cpu", o.CPU}, {"mem", o.Mem}, {"gpu", o.GPU}, {"gpu_mem", o.GPUMem}} {
		if f.v != nil && !(*f.v >= 0 && *f.v <= 1) { // NaN fails both
			return fmt.Errorf("%s: %v is not in [0,1]", f.name, *f.v)
		}
	}
	c := *o
	s.pin.Store(&c)
	return nil
}

// Overridden reports whether an override is set.
func (s *Sampler) Overridden() bool { return s.pin.Load() != nil }
