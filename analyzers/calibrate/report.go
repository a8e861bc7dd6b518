package calibrate

import (
	"encoding/json"
	"math"
	"sort"
)

// DefaultBins is the number of bins Compute uses when asked for fewer than 1.
const DefaultBins = 15

// Report describes how well confidence predicts correctness over a set of
// labelled pairs. Its float fields are all NaN when Labels is 0 (its Bins
// are then all empty); MarshalJSON writes NaN as null. A Report is a plain
// value, safe to share once Compute has returned it.
type Report struct {
	// Labels is the number of pairs used: those with a confidence in [0, 1].
	Labels int `json:"labels"`
	// Accuracy is the share of pairs labelled correct.
	Accuracy float64 `json:"accuracy"`
	// MeanConfidence is the mean confidence.
	MeanConfidence float64 `json:"mean_confidence"`
	// ECE is the expected calibration error Σ_b (n_b/N)·|acc_b − conf_b|
	// over Bins.
	ECE float64 `json:"ece"`
	// MCE is the maximum calibration error max_b |acc_b − conf_b| over the
	// non-empty Bins.
	MCE float64 `json:"mce"`
	// Bins are the reliability bins, all of them, empty ones included.
	Bins []Bin `json:"bins"`
	// Temperature is the T in (0.05, 20) minimizing the mean binary negative
	// log-likelihood of sigmoid(logit(p)/T); above 1 means the confidences
	// are too high (over-confident), below 1 too low.
	Temperature float64 `json:"temperature"`
	// NLL is the mean binary negative log-likelihood of the confidences as
	// they are (T = 1), in nats.
	NLL float64 `json:"nll"`
	// NLLCalibrated is the mean binary negative log-likelihood at
	// Temperature, in nats.
	NLLCalibrated float64 `json:"nll_calibrated"`
}

// Bin is one reliability bin: the pairs whose confidence lies in (Lo, Hi]
// (the first bin also takes Lo = 0). Confidence and Accuracy are 0 when
// Count is 0.
type Bin struct {
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	Count int     `json:"count"`
	// Confidence is the mean confidence of the bin's pairs.
	Confidence float64 `json:"confidence"`
	// Accuracy is the share of the bin's pairs labelled correct.
	Accuracy float64 `json:"accuracy"`
}

// Compute returns the calibration Report of pairs over bins equal-width
// confidence bins (DefaultBins when bins < 1). Pairs whose confidence is NaN
// or outside [0, 1] are skipped. With no pairs left it returns Labels 0, the
// empty bins, and NaN in every other float field; it never panics.
//
// Bin edges are e_k = k·(1/bins) for k < bins and e_bins = 1, computed as
// numpy.linspace(0, 1, bins+1) computes them, and bin k holds the
// confidences p with e_k < p <= e_{k+1}; bin 0 also holds p = 0. That is the
// membership of scikit-learn 1.2's calibration_curve(strategy="uniform"),
// which bins with numpy.searchsorted(edges[1:-1], p) (side "left"), so a
// confidence exactly on an interior edge falls in the bin below it. ECE and
// MCE use the same bins.
//
// The temperature fit clips confidences to [1e-12, 1-1e-12] before taking
// logits, and minimizes the mean negative log-likelihood over log T in
// [log 0.05, log 20] with Brent's method (scipy's bounded minimize_scalar),
// to 1e-10 in log T. The likelihood is convex in 1/T, so it has one minimum
// in log T; when the data push T to a bound (all labels correct, say) the
// result lies within the tolerance of that bound.
func Compute(pairs []Pair, bins int) Report {
	if bins < 1 {
		bins = DefaultBins
	}
	edges := linspace01(bins)
	r := Report{Bins: make([]Bin, bins)}
	for k := range r.Bins {
		r.Bins[k].Lo, r.Bins[k].Hi = edges[k], edges[k+1]
	}
	sumConf := make([]float64, bins)
	sumTrue := make([]float64, bins)
	logits := make([]float64, 0, len(pairs))
	labels := make([]bool, 0, len(pairs))
	var conf, acc float64
	interior := edges[1:bins]
	for _, p := range pairs {
		c := p.Confidence
		if !(c >= 0 && c <= 1) {
			continue
		}
		k := sort.SearchFloat64s(interior, c)
		r.Bins[k].Count++
		sumConf[k] += c
		conf += c
		if p.Correct {
			sumTrue[k]++
			acc++
		}
		logits = append(logits, logit(c))
		labels = append(labels, p.Correct)
	}
	n := len(logits)
	r.Labels = n
	if n == 0 {
		nan := math.NaN()
		r.Accuracy, r.MeanConfidence, r.ECE, r.MCE = nan, nan, nan, nan
		r.Temperature, r.NLL, r.NLLCalibrated = nan, nan, nan
		return r
	}
	r.Accuracy = acc / float64(n)
	r.MeanConfidence = conf / float64(n)
	for k := range r.Bins {
		b := &r.Bins[k]
		if b.Count == 0 {
			continue
		}
		b.Confidence = sumConf[k] / float64(b.Count)
		b.Accuracy = sumTrue[k] / float64(b.Count)
		gap := math.Abs(b.Accuracy - b.Confidence)
		r.ECE += float64(b.Count) / float64(n) * gap
		r.MCE = max(r.MCE, gap)
	}
	r.NLL = nll(logits, labels, 1)
	r.Temperature = fitTemperature(logits, labels)
	r.NLLCalibrated = nll(logits, labels, r.Temperature)
	return r
}

// linspace01 returns numpy.linspace(0, 1, bins+1) bit for bit: k·(1/bins),
// with the last edge set to 1.
func linspace01(bins int) []float64 {
	edges := make([]float64, bins+1)
	step := 1 / float64(bins)
	for k := range edges {
		edges[k] = float64(k) * step
	}
	edges[bins] = 1
	return edges
}

// MarshalJSON encodes r with its NaN fields (all of them when Labels is 0)
// as null, since JSON has no NaN and encoding/json refuses it.
func (r Report) MarshalJSON() ([]byte, error) {
	num := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	return json.Marshal(struct {
		Labels         int      `json:"labels"`
		Accuracy       *float64 `json:"accuracy"`
		MeanConfidence *float64 `json:"mean_confidence"`
		ECE            *float64 `json:"ece"`
		MCE            *float64 `json:"mce"`
		Bins           []Bin    `json:"bins"`
		Temperature    *float64 `json:"temperature"`
		NLL            *float64 `json:"nll"`
		NLLCalibrated  *float64 `json:"nll_calibrated"`
	}{
		r.Labels, num(r.Accuracy), num(r.MeanConfidence), num(r.ECE), num(r.MCE),
		r.Bins, num(r.Temperature), num(r.NLL), num(r.NLLCalibrated),
	})
}
