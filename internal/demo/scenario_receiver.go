package demo

import (
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
)

// receiver is the demo's built-in alert receiver: a webhook endpoint on
// 127.0.0.1 (alerts.webhook_url) that keeps every alert Vigil posts to it,
// so that the story can tell which notifications arrived. It is safe for
// concurrent use; run serves it until its context is done.
type receiver struct {
	ln net.Listener

	mu  sync.Mutex
	got []receipt
}

// receipt is one alert as the receiver got it.
type receipt struct {
	at       time.Time
	name     string
	resolved bool
	labels   map[string]string
}

// maxReceiverBody bounds a webhook body; Vigil's batches are far smaller.
const maxReceiverBody = 1 << 20

// maxReceipts bounds what the receiver keeps (the newest win), whatever
// posts to it for however long.
const maxReceipts = 10000

// newReceiver listens on a free port of 127.0.0.1.
func newReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return &receiver{ln: ln}, nil
}

// URL is the webhook URL to give Vigil.
func (r *receiver) URL() string { return "http://" + r.ln.Addr().String() + "/alerts" }

// ServeHTTP takes one webhook post (alert.WebhookBody). A resolution is an
// alert whose endsAt has passed: a firing one's lies ahead.
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var body alert.WebhookBody
	if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxReceiverBody)).Decode(&body); err != nil {
		http.Error(w, "bad webhook body: "+err.Error(), http.StatusBadRequest)
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range body.Alerts {
		r.got = append(r.got, receipt{at: now, name: n.Labels["alertname"], resolved: !n.EndsAt.After(now), labels: n.Labels})
	}
	if n := len(r.got) - maxReceipts; n > 0 {
		r.got = slices.Delete(r.got, 0, n)
	}
	w.WriteHeader(http.StatusOK)
}

// all returns every receipt kept, oldest first.
func (r *receiver) all() []receipt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// since returns the receipts from t on, oldest first.
func (r *receiver) since(t time.Time) []receipt {
	var out []receipt
	for _, rc := range r.all() {
		if !rc.at.Before(t) {
			out = append(out, rc)
		}
	}
	return out
}
