package gateway

import (
	"context"
	"sync"

	"github.com/vigil-gw/vigil/exchange"
)

// An Observer receives every request, SSE event and response end that passes
// through the gateway. A request that no backend was chosen for (the
// gateway answered it: a bad request, no healthy backend, a cache hit)
// gets OnResponse only, with an empty Request.Backend. Its methods are
// called from one dispatcher goroutine, in order per request, never from
// the request path; a slow Observer costs dropped events, counted in
// vigil_observer_dropped_events_total, never client latency.
type Observer interface {
	OnRequest(r *exchange.Request)
	// OnEvent receives the payload of one SSE data line; data is valid only
	// during the call.
	OnEvent(r *exchange.Request, data []byte)
	OnResponse(r *exchange.Request, resp *exchange.Response)
}

type eventKind uint8

const (
	evRequest eventKind = iota
	evChunk
	evResponse
)

type event struct {
	kind eventKind
	req  *exchange.Request
	data *[]byte
	resp *exchange.Response
}

// dispatcher moves events from request goroutines to the Observer over a
// bounded queue. Sends never block: when the queue is full the event is
// dropped and counted.
type dispatcher struct {
	obs     Observer
	queue   chan event
	bufs    sync.Pool
	dropped func()
}

func newDispatcher(obs Observer, size int, dropped func()) *dispatcher {
	d := &dispatcher{obs: obs, queue: make(chan event, size), dropped: dropped}
	d.bufs.New = func() any { b := make([]byte, 0, 512); return &b }
	return d
}

func (d *dispatcher) send(ev event) {
	select {
	case d.queue <- ev:
	default:
		if ev.data != nil {
			d.put(ev.data)
		}
		d.dropped()
	}
}

func (d *dispatcher) request(r *exchange.Request) { d.send(event{kind: evRequest, req: r}) }

// chunk copies data into a pooled buffer and queues it.
func (d *dispatcher) chunk(r *exchange.Request, data []byte) {
	if len(d.queue) == cap(d.queue) { // full: skip the copy
		d.dropped()
		return
	}
	b := d.bufs.Get().(*[]byte)
	*b = append((*b)[:0], data...)
	d.send(event{kind: evChunk, req: r, data: b})
}

func (d *dispatcher) response(r *exchange.Request, resp *exchange.Response) {
	d.send(event{kind: evResponse, req: r, resp: resp})
}

func (d *dispatcher) put(b *[]byte) {
	if cap(*b) > 64<<10 { // let rare huge events go to the GC
		return
	}
	d.bufs.Put(b)
}

// Run delivers events until ctx is done, then drains what is queued.
func (d *dispatcher) Run(ctx context.Context) error {
	for {
		select {
		case ev := <-d.queue:
			d.deliver(ev)
		case <-ctx.Done():
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

func (d *dispatcher) deliver(ev event) {
	switch ev.kind {
	case evRequest:
		d.obs.OnRequest(ev.req)
	case evChunk:
		d.obs.OnEvent(ev.req, *ev.data)
		d.put(ev.data)
	case evResponse:
		d.obs.OnResponse(ev.req, ev.resp)
	}
}
