package alert

import (
	"slices"
	"sync"
	"time"
)

// Delivery is one notification as the engine handed it on, for people to
// see what was sent (GET /admin/notifications, the dashboard).
type Delivery struct {
	Time      time.Time         `json:"time"`
	Name      string            `json:"name"`
	Resolved  bool              `json:"resolved"`
	Labels    map[string]string `json:"labels"`
	Summary   string            `json:"summary,omitempty"`
	Outcome   string            `json:"outcome"` // sent, retrying, failed, dropped or no_receiver
	Error     string            `json:"error,omitempty"`
	StartedAt time.Time         `json:"started_at"`
}

// Delivery outcomes.
const (
	OutcomeSent       = "sent"
	OutcomeRetrying   = "retrying"    // failed, and will be sent again
	OutcomeFailed     = "failed"      // failed for good
	OutcomeDropped    = "dropped"     // the delivery queue was full
	OutcomeNoReceiver = "no_receiver" // no Alertmanager or webhook configured: listed here only
)

// maxDeliveries bounds the deliveries kept.
const maxDeliveries = 200

// deliveryLog keeps the newest deliveries, bounded. It is safe for
// concurrent use.
type deliveryLog struct {
	mu   sync.Mutex
	ring []Delivery
}

func (l *deliveryLog) add(now time.Time, ns []Notification, outcome string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range ns {
		d := Delivery{Time: now.UTC(), Name: n.Labels["alertname"], Resolved: n.Resolved(), Labels: n.Labels,
			Summary: n.Annotations["summary"], Outcome: outcome, StartedAt: n.StartsAt.UTC()}
		if err != nil {
			d.Error = err.Error()
		}
		l.ring = append(l.ring, d)
	}
	if n := len(l.ring) - maxDeliveries; n > 0 {
		l.ring = slices.Delete(l.ring, 0, n)
	}
}

// Deliveries returns the newest deliveries (at most 200), oldest first.
func (e *Engine) Deliveries() []Delivery {
	e.deliveries.mu.Lock()
	defer e.deliveries.mu.Unlock()
	return append([]Delivery{}, e.deliveries.ring...)
}
