package app

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// signalsDrift is what TestContentShiftThroughGateway reads of
// /admin/signals.
type signalsDrift struct {
	Drift struct {
		State    string
		Features []struct {
			Name  string
			Drift bool
		}
		Content *struct {
			AUC  float64
			Rose []struct{ Term string }
		}
		Embedding *struct{ AUC float64 }
		Embedder  *struct{ Embedded, Dropped, Failed int64 }
	}
}

// TestContentShiftThroughGateway: clients on the openai-go SDK ask about
// two subjects (fortunes: politics and work, in four templates) through
// the gateway; the baseline is pinned; more of the same is no drift; then
// they ask about two other subjects (people and kids) at the same lengths,
// and input drift turns to drift on the content test alone, its risen
// terms hashed ids (analyzers.drift.text.explain is off by default).
func TestContentShiftThroughGateway(t *testing.T) {
	testutil.SkipStatisticalUnderRace(t)
	url := topicShift(t, nil, func(s signalsDrift) bool { return s.Drift.Content != nil })
	var last signalsDrift
	waitFor(t, 60*time.Second, func() bool {
		last = readDrift(t, url)
		return last.Drift.State == "drift"
	})
	if got := driftedFeatures(last); !slices.Equal(got, []string{"content"}) || last.Drift.Content == nil ||
		len(last.Drift.Content.Rose) == 0 || !strings.HasPrefix(last.Drift.Content.Rose[0].Term, "#") {
		t.Errorf("drifted %v, content %+v: want the content alone, its risen terms hashed", got, last.Drift.Content)
	}
	t.Logf("content drift: AUC %.3f, rose %v", last.Drift.Content.AUC, last.Drift.Content.Rose)
}

// topicShift serves a gateway in front of a simulator of model "m"
// (analyzers at 1 s buckets and evaluations, a 30 s window, min_requests
// 100, samples of 400) with, when emb is set, the embedding test on every
// prompt through emb (backend "emb", model "e"). Clients ask about
// politics and work (fortunes, topicTraffic) until ready holds; the
// baseline is pinned; the 20 evaluations after it, of the same subjects,
// must not drift. Then the clients turn to people and kids at the same
// lengths, and topicShift returns the gateway's URL. Its callers skip
// under the race detector (test/run finds them by that call, and runs
// them without it).
func topicShift(t *testing.T, emb *httptest.Server, ready func(signalsDrift) bool) string {
	if testing.Short() {
		t.Skip("-short: about half a minute of traffic")
	}
	ref := testutil.Fortunes(t, "politics", "work")
	other := testutil.Fortunes(t, "people", "kids")
	twins := shapeTwins(ref, other, 5)

	k := sim.DefaultKnobs()
	k.TTFT, k.ITL, k.OutputTokens = 0, 0, 4
	srv := httptest.NewServer(sim.New(sim.Options{Model: "m", Seed: 1, Knobs: k}).Handler())
	t.Cleanup(srv.Close)
	cfg := testConfig(srv.URL)
	an := &cfg.Analyzers
	an.Bucket, an.Window, an.Reference, an.Interval, an.MinRequests = time.Second, 30*time.Second, 2*time.Minute, time.Second, 100
	an.Drift.Reservoir = 400
	if emb != nil {
		cfg.Backends[0].Models = []string{"m"}
		cfg.Backends = append(cfg.Backends, config.Backend{Name: "emb", URL: emb.URL, Kind: "openai", Weight: 100, Models: []string{"e"}})
		e := &an.Drift.Text.Embeddings
		e.Backend, e.Model, e.SampleRatio = "emb", "e", 1
	}
	if err := cfg.ValidateServe(); err != nil {
		t.Fatal(err)
	}
	_, url, _ := serveApp(t, cfg)

	var shifted atomic.Bool
	topicTraffic(t, url, ref, other, twins, &shifted)
	waitFor(t, 60*time.Second, func() bool { return ready(readDrift(t, url)) })
	if code, _, body := testutil.Post(t, url+"/admin/baseline", ""); code != http.StatusOK {
		t.Fatalf("POST /admin/baseline: %d %s", code, body)
	}
	// Every evaluation after the pin, as the history records them, until
	// there are 20: however late a busy machine makes them, none is skipped.
	pinned := time.Now().UTC().Format(time.RFC3339Nano)
	var evals []historyDrift
	waitFor(t, 2*time.Minute, func() bool {
		var h struct{ Points []historyDrift }
		getJSON(t, url+"/admin/history?since="+pinned, &h)
		evals = slices.DeleteFunc(h.Points, func(p historyDrift) bool { return p.Drift == nil })
		return len(evals) >= 20
	})
	for _, p := range evals {
		if p.Drift.State == "drift" {
			t.Fatalf("the same subjects: input drift at %v (score %v; PSI by feature %v)", p.T, p.Drift.Score, p.Drift.Features)
		}
	}
	shifted.Store(true)
	return url
}

// historyDrift is what topicShift reads of a point of /admin/history.
type historyDrift struct {
	T     time.Time
	Drift *struct {
		State    string
		Score    float64
		Features map[string]float64
	}
}

// topicTraffic sends chat requests through the gateway at url from four
// openai-go clients until the test ends: one of ref's texts in one of four
// templates, or, once shifted, in its place one of other's texts that
// twins names for it: a change of subject, not of shape.
func topicTraffic(t *testing.T, url string, ref, other []string, twins [][]int, shifted *atomic.Bool) {
	templates := []string{"Explain: %s", "Summarize in one line: %s", "What does this mean? %s", "Rewrite this more formally: %s"}
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for w := range 4 {
		rng := rand.New(rand.NewPCG(uint64(w), 3))
		wg.Go(func() {
			for ctx.Err() == nil {
				i := rng.IntN(len(ref))
				text := ref[i]
				if shifted.Load() {
					text = other[twins[i][rng.IntN(len(twins[i]))]]
				}
				_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
					Model:     "m",
					Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf(templates[rng.IntN(len(templates))], text))},
					MaxTokens: openai.Int(4),
				})
				if err != nil && ctx.Err() == nil {
					t.Errorf("client %d: %v", w, err)
					return
				}
			}
		})
	}
}

// shapeTwins names, for each of ref's texts, the k texts of other nearest
// to it in shape: its length (log bytes) and its shares of letters,
// digits, spaces and punctuation, each standardized over both sets. Drawn
// in place of ref's texts they change the subject and keep the shape
// features' distributions: matched on length alone, the subjects' word
// lengths showed in the share of spaces and letters (simulated windows of
// 400, KS at 0.002 and PSI 0.1: about 1 in 17 drifted, against 1 in 200
// so matched), and once failed the test on script_latin.
func shapeTwins(ref, other []string, k int) [][]int {
	shape := func(s string) [5]float64 {
		var letters, digits, spaces, punct, n float64
		for _, r := range s {
			n++
			switch {
			case unicode.IsLetter(r):
				letters++
			case unicode.IsDigit(r):
				digits++
			case unicode.IsSpace(r):
				spaces++
			default:
				punct++
			}
		}
		return [5]float64{math.Log(float64(len(s))), letters / n, digits / n, spaces / n, punct / n}
	}
	a, b := make([][5]float64, len(ref)), make([][5]float64, len(other))
	var mean, sq [5]float64
	for i, s := range ref {
		a[i] = shape(s)
	}
	for i, s := range other {
		b[i] = shape(s)
	}
	all := append(slices.Clone(a), b...)
	for _, x := range all {
		for j := range x {
			mean[j] += x[j] / float64(len(all))
		}
	}
	for _, x := range all {
		for j := range x {
			sq[j] += (x[j] - mean[j]) * (x[j] - mean[j]) / float64(len(all))
		}
	}
	dist := func(x, y [5]float64) float64 {
		var d float64
		for j := range x {
			if sq[j] > 0 {
				d += (x[j] - y[j]) * (x[j] - y[j]) / sq[j]
			}
		}
		return d
	}
	twins := make([][]int, len(ref))
	order := make([]int, len(other))
	for i, x := range a {
		for j := range order {
			order[j] = j
		}
		slices.SortFunc(order, func(p, q int) int { return cmp.Compare(dist(x, b[p]), dist(x, b[q])) })
		twins[i] = slices.Clone(order[:k])
	}
	return twins
}

// readDrift reads input drift from /admin/signals.
func readDrift(t *testing.T, url string) signalsDrift {
	code, body := testutil.Get(t, url+"/admin/signals")
	var s signalsDrift
	if err := json.Unmarshal(body, &s); code != http.StatusOK || err != nil {
		t.Fatalf("GET /admin/signals: %d %v", code, err)
	}
	return s
}

// driftedFeatures names the features that drifted, in their order.
func driftedFeatures(s signalsDrift) []string {
	var out []string
	for _, f := range s.Drift.Features {
		if f.Drift {
			out = append(out, f.Name)
		}
	}
	return out
}

// TestEmbeddingShiftThroughGateway is TestContentShiftThroughGateway with
// the embedding test on: every prompt is embedded through a second
// simulator (backend "emb", model "e"), whose vectors show the words a
// text holds. The same subjects are no drift; the other subjects drift on
// the content and the embedding tests, and on nothing else. Then the
// embedding backend goes down: the clients see nothing of it (none of
// their requests fails) and its prompts are counted failed or dropped.
func TestEmbeddingShiftThroughGateway(t *testing.T) {
	testutil.SkipStatisticalUnderRace(t)
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL, k.OutputTokens = 0, 0, 4
	emb := httptest.NewServer(sim.New(sim.Options{Model: "e", Seed: 2, Knobs: k}).Handler())
	t.Cleanup(emb.Close)
	url := topicShift(t, emb, func(s signalsDrift) bool { return s.Drift.Embedding != nil })
	var last signalsDrift
	waitFor(t, 60*time.Second, func() bool {
		last = readDrift(t, url)
		return slices.Contains(driftedFeatures(last), "embedding")
	})
	if got := driftedFeatures(last); !slices.Equal(got, []string{"content", "embedding"}) && !slices.Equal(got, []string{"embedding"}) {
		t.Errorf("drifted %v: want the content and embedding tests alone", got)
	}
	st := last.Drift.Embedder
	if st == nil || st.Embedded == 0 {
		t.Fatalf("embedder %+v: nothing embedded", st)
	}
	t.Logf("embedding drift: AUC %.3f; embedder %+v", last.Drift.Embedding.AUC, *st)

	// The embedding backend goes down: its prompts fail, the clients'
	// requests do not (topicTraffic fails the test on any error).
	emb.CloseClientConnections()
	emb.Close()
	lost := st.Failed + st.Dropped
	waitFor(t, 30*time.Second, func() bool {
		s := readDrift(t, url).Drift.Embedder
		return s.Failed+s.Dropped > lost+100
	})
}

// waitFor polls cond every 100 ms (each poll costs a request and, for
// /admin/signals, an evaluation) until it holds; guard only stops a hang,
// however slow the machine.
func waitFor(t *testing.T, guard time.Duration, cond func() bool) {
	t.Helper()
	if !testutil.Poll(guard, 100*time.Millisecond, cond) {
		t.Fatalf("not within %v", guard)
	}
}
