package analyzers

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-gw/vigil/analyzers/calibrate"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/state"
)

// ErrUnknownResponse is returned by Feedback for a response id that is not
// (or no longer) remembered.
var ErrUnknownResponse = exchange.ErrUnknownResponse

// Feedback joins a user's label to a remembered response, for calibration.
// Responses are remembered when they carried logprobs and an id (OpenAI
// APIs), for analyzers.calibration.ttl.
func (p *Pipeline) Feedback(ctx context.Context, id string, correct bool) error {
	if p.calib == nil {
		return errors.New("calibration needs analyzers.confidence.enabled")
	}
	var store state.Store
	if p.share != nil {
		store = p.share.Config().Store
	}
	return p.calib.label(ctx, store, id, correct, p.now())
}

// maxPendingShare bounds the remembered responses waiting for a flush;
// beyond it they stay local (feedback must then reach the same replica),
// counted in vigil_calibration_unshared_total.
const maxPendingShare = 100000

// respKey is the store document holding a remembered response's confidence.
func respKey(id string) string { return "resp:" + id }

// labelsSeries is the store series holding each replica's labels.
const labelsSeries = "labels"

// feedback remembers responses for calibration and joins users' labels to
// them. With sharing it also writes the responses it remembers to the
// store, so that feedback reaching another replica finds them, and reads
// the other replicas' labels. Its methods are safe for concurrent use;
// sync is called by one flusher at a time.
type feedback struct {
	store *calibrate.Store
	ttl   time.Duration
	// unshared counts responses remembered only here because too many
	// waited for a flush.
	unshared prometheus.Counter

	// Sharing state; pending is nil without sharing.
	mu       sync.Mutex
	pending  map[string]float64 // remembered since the last flush
	version  atomic.Int64       // bumped by every label
	labelsAt int64              // version last written (sync only)
	remote   atomic.Pointer[[]calibrate.Pair]
}

func newFeedback(store *calibrate.Store, ttl time.Duration, shared bool, unshared prometheus.Counter) *feedback {
	f := &feedback{store: store, ttl: ttl, unshared: unshared}
	if shared {
		f.pending = map[string]float64{}
	}
	return f
}

// remember keeps a response's confidence for labels to come.
func (f *feedback) remember(id string, conf float64, at time.Time) {
	f.store.Remember(id, conf, at)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending == nil {
		return
	}
	if len(f.pending) < maxPendingShare {
		f.pending[id] = conf
	} else {
		f.unshared.Inc()
	}
}

// label records a user's label. A response unknown here is looked up in
// the shared store (nil: none), where the replica that served it wrote it.
func (f *feedback) label(ctx context.Context, shared state.Store, id string, correct bool, now time.Time) error {
	err := f.store.Label(id, correct, now)
	if errors.Is(err, calibrate.ErrUnknown) && shared != nil {
		if conf, ok := lookupResponse(ctx, shared, id); ok {
			f.store.Remember(id, conf, now)
			err = f.store.Label(id, correct, now)
		}
	}
	if errors.Is(err, calibrate.ErrUnknown) {
		return ErrUnknownResponse
	}
	if err == nil {
		f.version.Add(1)
	}
	return err
}

// lookupResponse reads a remembered response's confidence from the store.
func lookupResponse(ctx context.Context, s state.Store, id string) (float64, bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, err := s.Get(ctx, respKey(id))
	if err != nil {
		return 0, false
	}
	conf, err := strconv.ParseFloat(string(v), 64)
	return conf, err == nil
}

// pairs is the labelled pairs of this replica and, with sharing, the others'.
func (f *feedback) pairs() []calibrate.Pair {
	local := f.store.Pairs()
	if r := f.remote.Load(); r != nil {
		local = append(local, *r...)
	}
	return local
}

// sync writes the responses remembered since the last call and this
// replica's labels when they changed (under seq, as replica); with
// readRemote it also reads the other replicas' labels.
func (f *feedback) sync(ctx context.Context, s state.Store, replica string, seq uint64, readRemote bool) error {
	f.mu.Lock()
	pend := f.pending
	f.pending = map[string]float64{}
	f.mu.Unlock()
	if len(pend) > 0 {
		docs := make(map[string][]byte, len(pend))
		for id, conf := range pend {
			docs[respKey(id)] = strconv.AppendFloat(nil, conf, 'g', -1, 64)
		}
		if err := s.SetMany(ctx, docs, f.ttl); err != nil {
			f.mu.Lock()
			for id, conf := range pend { // try again next time
				if len(f.pending) < maxPendingShare {
					f.pending[id] = conf
				}
			}
			f.mu.Unlock()
			return err
		}
	}
	if v := f.version.Load(); v != f.labelsAt {
		b, err := json.Marshal(f.store.Pairs())
		if err != nil {
			return err
		}
		if err := s.PutBuckets(ctx, labelsSeries, replica, seq, []state.Bucket{{Payload: b}}, f.ttl); err != nil {
			return err
		}
		f.labelsAt = v
	}
	if !readRemote {
		return nil
	}
	all, err := s.Buckets(ctx, labelsSeries, 0, 0)
	if err != nil {
		return err
	}
	var remote []calibrate.Pair
	for _, b := range all {
		if b.Replica == replica {
			continue
		}
		var ps []calibrate.Pair
		if json.Unmarshal(b.Payload, &ps) == nil {
			remote = append(remote, ps...)
		}
	}
	f.remote.Store(&remote)
	return nil
}
