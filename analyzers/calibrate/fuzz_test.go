package calibrate

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Fuzz targets for what POST /v1/feedback and other replicas hand to
// calibration: the labels of response ids (the Store) and the
// labelled pairs replicas share as JSON (Compute). test/run runs each for
// 5 s after the race tests, `test/run -fuzz` for 60 s; one by hand:
//
//	go test -run '^$' -fuzz '^FuzzStore$' -fuzztime 60s ./analyzers/calibrate/

// refStore is the Store's contract written plainly: a list of remembered
// responses in insertion order and the full history of labelled pairs.
type refStore struct {
	maxPending, maxLabels int
	ttl                   time.Duration
	resp                  []refResp
	pairs                 []Pair // every pair ever labelled; the Store keeps the last maxLabels
}

type refResp struct {
	id    string
	conf  float64
	at    time.Time
	label int // 1 + the index of its pair in pairs; 0: none
}

func (r *refStore) find(id string) int {
	return slices.IndexFunc(r.resp, func(x refResp) bool { return x.id == id })
}

func (r *refStore) expired(x refResp, now time.Time) bool { return r.ttl > 0 && now.Sub(x.at) >= r.ttl }

func (r *refStore) remember(id string, conf float64, now time.Time) {
	if id == "" || !(conf > 0 && conf <= 1) {
		return
	}
	if i := r.find(id); i >= 0 {
		r.resp = slices.Delete(r.resp, i, i+1)
	}
	for len(r.resp) > 0 && r.expired(r.resp[0], now) {
		r.resp = r.resp[1:]
	}
	if len(r.resp) >= r.maxPending {
		r.resp = r.resp[1:]
	}
	r.resp = append(r.resp, refResp{id: id, conf: conf, at: now})
}

func (r *refStore) label(id string, correct bool, now time.Time) error {
	i := r.find(id)
	if i < 0 {
		return ErrUnknown
	}
	if r.expired(r.resp[i], now) {
		r.resp = slices.Delete(r.resp, i, i+1)
		return ErrUnknown
	}
	p := Pair{Confidence: r.resp[i].conf, Correct: correct}
	if l := r.resp[i].label; l != 0 && len(r.pairs)-(l-1) <= r.maxLabels {
		r.pairs[l-1] = p // still kept: relabelled in place
		return nil
	}
	r.pairs = append(r.pairs, p)
	r.resp[i].label = len(r.pairs)
	return nil
}

func (r *refStore) kept() []Pair {
	return slices.Clone(r.pairs[max(0, len(r.pairs)-r.maxLabels):])
}

// fuzzConfs are the confidences a fuzzed Remember may pass, invalid ones
// among them.
var fuzzConfs = []float64{0.5, 1, 0.01, 0.99, 0, -0.1, 1.5, math.NaN(), math.Inf(1), 0.25}

// FuzzStore: a Store driven by any sequence of Remember, Label and the
// passing of time behaves as its contract written plainly (refStore):
// Label knows exactly the ids remembered, not evicted and not expired;
// Pairs are the latest maxLabels labels, a relabelled response counting
// once; memory stays within maxPending responses and maxLabels pairs.
func FuzzStore(f *testing.F) {
	f.Add([]byte{0, 1, 2, 1, 1, 3, 2, 0, 0, 1, 1, 3, 4, 9, 5, 1, 1, 2}, uint8(3), uint8(2), uint8(4))
	f.Add([]byte("remember, label, relabel, expire, evict"), uint8(1), uint8(1), uint8(0))
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 2, 1, 0, 2, 1, 1, 0, 1}, uint8(0), uint8(0), uint8(1))
	f.Fuzz(func(t *testing.T, prog []byte, maxPending, maxLabels, ttl uint8) {
		mp, ml := 1+int(maxPending%8), 1+int(maxLabels%8)
		d := time.Duration(ttl%16) * time.Second // 0: no expiry
		s := NewStore(mp, d, ml)
		ref := &refStore{maxPending: mp, maxLabels: ml, ttl: d}
		now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
		for i := 0; i+2 < len(prog); i += 3 {
			op, a, b := prog[i], prog[i+1], prog[i+2]
			id := string(rune('a' + a%12))
			if a%13 == 12 {
				id = ""
			}
			switch op % 3 {
			case 0:
				c := fuzzConfs[int(b)%len(fuzzConfs)]
				s.Remember(id, c, now)
				ref.remember(id, c, now)
			case 1:
				correct := b&1 != 0
				err, want := s.Label(id, correct, now), ref.label(id, correct, now)
				if !errors.Is(err, want) || (err == nil) != (want == nil) {
					t.Fatalf("step %d: Label(%q) = %v, want %v", i/3, id, err, want)
				}
			case 2:
				now = now.Add(time.Duration(b) * 100 * time.Millisecond)
			}
			if want, got := ref.kept(), s.Pairs(); !slices.Equal(want, got) { // no NaN: Remember drops it
				t.Fatalf("step %d: Pairs (-want +got):\n%s", i/3, cmp.Diff(want, got))
			}
			pending, labels := s.Len()
			if pending != len(ref.resp) || labels != len(ref.kept()) || pending > mp || labels > ml || len(s.nodes) > mp {
				t.Fatalf("step %d: Len = %d, %d (%d nodes); want %d, %d, bounds %d, %d", i/3, pending, labels, len(s.nodes), len(ref.resp), len(ref.kept()), mp, ml)
			}
		}
	})
}

// FuzzComputePayload: the labelled pairs another replica shares (JSON, as
// analyzers' feedback sync decodes them) never make Compute panic, and its
// report stays sane: it counts exactly the pairs with a confidence in
// [0, 1], its bins add up to that count, rates and errors lie in [0, 1],
// ECE <= MCE, the fitted temperature lies in its bounds and does not fit
// worse than T = 1; with no usable pair every float is NaN, written as
// null. The report always marshals to JSON.
func FuzzComputePayload(f *testing.F) {
	for _, s := range []string{
		`[{"confidence":0.9,"correct":true},{"confidence":0.2,"correct":false}]`, `[]`, `null`, `{}`,
		`[{"confidence":1,"correct":true},{"confidence":0,"correct":true},{"confidence":1e-300,"correct":false}]`,
		`[{"confidence":-1},{"confidence":2,"correct":true},{"confidence":1e308}]`,
		`[{"confidence":0.5,"correct":true},{"confidence":0.5,"correct":true},{"confidence":0.5,"correct":true}]`,
		`[{"confidence":0.06666666666666667},{"confidence":0.9999999999999999,"correct":true}]`,
	} {
		f.Add([]byte(s), uint8(15))
	}
	f.Fuzz(func(t *testing.T, payload []byte, bins uint8) {
		var ps []Pair
		if json.Unmarshal(payload, &ps) != nil {
			return
		}
		nb := int(bins % 64) // 0: DefaultBins
		r := Compute(ps, nb)
		if nb == 0 {
			nb = DefaultBins
		}
		usable := 0
		for _, p := range ps {
			if p.Confidence >= 0 && p.Confidence <= 1 {
				usable++
			}
		}
		binned := 0
		for _, b := range r.Bins {
			binned += b.Count
			if b.Count > 0 && !(b.Confidence >= b.Lo-1e-12 && b.Confidence <= b.Hi+1e-12 && in01(b.Accuracy)) {
				t.Fatalf("%s: bin %+v", payload, b)
			}
		}
		if r.Labels != usable || len(r.Bins) != nb || binned != usable {
			t.Fatalf("%s: %d labels, %d bins holding %d; want %d labels, %d bins", payload, r.Labels, len(r.Bins), binned, usable, nb)
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("%s: report does not marshal: %v", payload, err)
		}
		floats := []float64{r.Accuracy, r.MeanConfidence, r.ECE, r.MCE, r.Temperature, r.NLL, r.NLLCalibrated}
		if usable == 0 {
			for _, v := range floats {
				if !math.IsNaN(v) {
					t.Fatalf("%s: no usable pair, report %+v", payload, r)
				}
			}
			return
		}
		const eps = 1e-9
		if !in01(r.Accuracy) || !in01(r.MeanConfidence) || !in01(r.ECE) || !in01(r.MCE) || r.ECE > r.MCE+eps {
			t.Fatalf("%s: report %+v", payload, r)
		}
		if !(r.Temperature >= 0.05*(1-1e-6) && r.Temperature <= 20*(1+1e-6)) || !(r.NLL >= 0) || !(r.NLLCalibrated >= 0) ||
			r.NLLCalibrated > r.NLL*(1+1e-6)+eps {
			t.Fatalf("%s: temperature %v, NLL %v, calibrated %v", payload, r.Temperature, r.NLL, r.NLLCalibrated)
		}
	})
}

// in01 reports whether v is in [0, 1], give or take rounding.
func in01(v float64) bool { return v >= 0 && v <= 1+1e-12 }
