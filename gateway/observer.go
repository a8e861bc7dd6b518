package gateway

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-gw/vigil/exchange"
)

// An Observer receives every prompt, request, SSE event and response end that
// passes through the gateway. A request that no backend answered (the
// gateway did: a bad request, no healthy backend, a refused quota, a
// cache hit) gets no OnRequest and its OnResponse has an empty
// Request.Backend; a cache hit, a prompt clients sent, got OnPrompt as
// well. Its methods are called from one dispatcher goroutine, in order per
// request, never from the request path; a slow Observer costs dropped
// events, counted in vigil_observer_dropped_events_total, never client
// latency. A request's calls come in batches (up to 16 SSE events or
// 2 KiB of them, and the last with OnResponse), so OnEvent may run after
// the stream ended. The Request an observer gets is not written by the
// gateway after OnRequest (or, without one, OnResponse) was queued.
type Observer interface {
	// OnPrompt receives the prompt of a request that carries one
	// (exchange.Operation.HasPrompt) once a backend or the cache is to
	// answer it, within promptTick, before its other calls: an observer
	// that counts prompts at their answer would miss those still being
	// answered, the slow ones, and see their absence as a change in what
	// clients send. start is the request's Start, body the client's body,
	// which the observer must not modify.
	OnPrompt(start time.Time, op exchange.Operation, body []byte)
	OnRequest(r *exchange.Request)
	// OnEvent receives the payload of one SSE data line; data is valid only
	// during the call.
	OnEvent(r *exchange.Request, data []byte)
	OnResponse(r *exchange.Request, resp *exchange.Response)
}

// An event is what the dispatcher hands the Observer at once for one
// request: OnRequest (open), then the SSE payloads in data, then
// OnResponse (resp), each part optional. A request's events are gathered
// on its goroutine and queued in batches: a channel send per
// SSE event woke the dispatcher for each, and on two cores that cost the
// request path more than the copy.
type event struct {
	req  *exchange.Request
	open bool               // OnRequest first
	data *[]byte            // n payloads, each after its length (4 bytes, little-endian); nil: none
	n    int                // payloads in data
	resp *exchange.Response // OnResponse last; nil: the request goes on
}

// events counts what ev hands the Observer.
func (ev *event) events() int {
	n := ev.n
	if ev.open {
		n++
	}
	if ev.resp != nil {
		n++
	}
	return n
}

// A batch gathers the events of one request not yet queued. It is used
// by the request's goroutine; its zero value is empty.
type batch struct {
	open bool    // OnRequest is due
	data *[]byte // payloads, as in event; nil: none yet
	n    int
}

// A batch is queued when it holds maxBatchEvents payloads, when the next
// payload would not fit in its batchBytes buffer, and when the request
// ends. A stream holds its batch between events, so the buffer is sized
// for several events of a few hundred bytes and never grows for ordinary
// ones: memory per stream is what bounds concurrent streams.
const (
	maxBatchEvents = 16
	batchBytes     = 2 << 10
)

// dispatcher moves events from request goroutines to the Observer over a
// bounded queue. Sends never block: a batch that finds queue_size events
// or more waiting is dropped and its events counted.
type dispatcher struct {
	obs    Observer
	queue  chan event
	size   int64
	queued atomic.Int64 // events queued and not yet delivered
	// prompts holds the prompts that wait for OnPrompt, at most
	// queue_size. The dispatcher never waits on it, so a send wakes
	// nobody: a wake-up per request is what batching spared the request
	// path. It drains the prompts whenever an event wakes it, and every
	// promptTick, so that prompts still reach the Observer when no
	// response comes (every backend hangs).
	prompts chan prompt
	bufs    sync.Pool
	dropped func(n int)
}

// promptTick bounds how long a prompt waits in the dispatcher's queue when
// no event wakes it.
const promptTick = 250 * time.Millisecond

func newDispatcher(obs Observer, size int, dropped func(n int)) *dispatcher {
	d := &dispatcher{obs: obs, queue: make(chan event, size), size: int64(size),
		prompts: make(chan prompt, size), dropped: dropped}
	d.bufs.New = func() any { b := make([]byte, 0, batchBytes); return &b }
	return d
}

// send queues ev, or drops it when the queue is full. The bound is in
// events: a batch is admitted while fewer than queue_size events wait, so
// the queue holds at most queue_size plus one batch.
func (d *dispatcher) send(ev event) {
	n := int64(ev.events())
	if n == 0 {
		return
	}
	if d.queued.Load() < d.size {
		d.queued.Add(n)
		select {
		case d.queue <- ev:
			return
		default: // not reached: the queue holds fewer batches than events
			d.queued.Add(-n)
		}
	}
	if ev.data != nil {
		d.put(ev.data)
	}
	d.dropped(int(n))
}

// A prompt is what OnPrompt gets of a request: a copy, so that the
// Request itself is handed over only with OnRequest or OnResponse.
type prompt struct {
	start time.Time
	op    exchange.Operation
	body  []byte // the client's, which nobody modifies
}

// prompt queues r's prompt for OnPrompt, or drops it (counted) when
// queue_size prompts wait.
func (d *dispatcher) prompt(r *exchange.Request) {
	select {
	case d.prompts <- prompt{start: r.Start, op: r.Operation, body: r.Body}:
	default:
		d.dropped(1)
	}
}

// request marks the request's OnRequest due, sent with its first batch.
func (d *dispatcher) request(b *batch) { b.open = true }

// chunk copies an SSE payload into the request's batch, and queues the
// batch when it is full.
func (d *dispatcher) chunk(r *exchange.Request, b *batch, data []byte) {
	if b.data != nil && b.n > 0 && len(*b.data)+4+len(data) > cap(*b.data) {
		d.flush(r, b, nil)
	}
	if b.data == nil {
		b.data = d.bufs.Get().(*[]byte)
		*b.data = (*b.data)[:0]
	}
	buf := binary.LittleEndian.AppendUint32(*b.data, uint32(len(data)))
	*b.data = append(buf, data...)
	b.n++
	if b.n >= maxBatchEvents {
		d.flush(r, b, nil)
	}
}

// flush queues what the batch holds, with the response when resp is not
// nil, and empties it.
func (d *dispatcher) flush(r *exchange.Request, b *batch, resp *exchange.Response) {
	d.send(event{req: r, open: b.open, data: b.data, n: b.n, resp: resp})
	*b = batch{}
}

// response queues the request's last batch with its response.
func (d *dispatcher) response(r *exchange.Request, b *batch, resp *exchange.Response) {
	d.flush(r, b, resp)
}

func (d *dispatcher) put(b *[]byte) {
	if cap(*b) > 64<<10 { // let rare huge batches go to the GC
		return
	}
	d.bufs.Put(b)
}

// Run delivers events until ctx is done, then drains what is queued.
func (d *dispatcher) Run(ctx context.Context) error {
	tick := time.NewTicker(promptTick)
	defer tick.Stop()
	for {
		select {
		case ev := <-d.queue:
			d.deliverPrompts()
			d.deliver(ev)
		case <-tick.C:
			d.deliverPrompts()
		case <-ctx.Done():
			d.deliverPrompts()
			for {
				select {
				case ev := <-d.queue:
					d.deliver(ev)
				default:
					return nil
				}
			}
		}
	}
}

// deliverPrompts hands the Observer the prompts queued so far.
func (d *dispatcher) deliverPrompts() {
	for len(d.prompts) > 0 {
		p := <-d.prompts
		d.obs.OnPrompt(p.start, p.op, p.body)
	}
}

func (d *dispatcher) deliver(ev event) {
	if ev.open {
		d.obs.OnRequest(ev.req)
	}
	if ev.data != nil {
		for b := *ev.data; len(b) >= 4; {
			n := binary.LittleEndian.Uint32(b)
			d.obs.OnEvent(ev.req, b[4:4+n])
			b = b[4+n:]
		}
		d.put(ev.data)
	}
	if ev.resp != nil {
		d.obs.OnResponse(ev.req, ev.resp)
	}
	d.queued.Add(-int64(ev.events()))
}
