package analyzers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/precision"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// weekRules are the rules the analyzers feed: a simulated week must give
// each of them values.
var weekRules = []string{
	alert.RuleDrift, alert.RuleConfidenceDrop, alert.RulePerplexity,
	alert.RuleTTFT, alert.RuleE2E, alert.RuleErrorRate, alert.RulePrecision,
}

// weekVocab are the words of weekTraffic's prompts, per language.
var weekVocab = map[string][]string{
	"en": strings.Fields("the system report user error latency model request answer summarise explain write list compare data table value code test deploy service cluster node memory"),
	"es": strings.Fields("el sistema informe usuario error latencia modelo petición respuesta resumir explicar escribir lista comparar datos tabla valor código prueba servicio nodo memoria"),
	"zh": strings.Fields("系统 报告 用户 错误 延迟 模型 请求 回答 总结 解释 写 列表 比较 数据 表格 数值 代码 测试 部署 服务 集群 节点 内存"),
	"ru": strings.Fields("система отчёт пользователь ошибка задержка модель запрос ответ кратко объясни напиши список сравни данные таблица значение код тест сервис узел память"),
}

// weekLanguages is the language mix, as cumulative shares.
var weekLanguages = []struct {
	lang  string
	below float64
}{{"en", 0.6}, {"es", 0.8}, {"zh", 0.9}, {"ru", 1}}

// weekTraffic is a stationary client population in front of a simulator:
// every draw comes from fixed distributions of one seeded generator, so any
// hour of traffic looks like any other and a run is reproducible. Its
// methods are used by one goroutine.
type weekTraffic struct {
	t    *testing.T
	rng  *rand.Rand
	h    http.Handler // the simulator answering the clients: backend "fp16"
	int8 http.Handler // a quantized copy of it, shadow-compared against it
	p    *Pipeline
	now  time.Time
	// ttftScale multiplies every TTFT when set (an injected step).
	ttftScale float64

	requests, streams, errors int
}

// body returns a chat request: a word count drawn from a normal
// distribution (mean 20, σ 6), a language from a fixed mix, a number now
// and then, a code block in 5% of the prompts, a system prompt in 30%,
// max_tokens (3, 4 or 5) and temperature from small sets, logprobs without
// alternatives, streamed (with usage) half of the time. Prompts and answers
// are short, and top_logprobs absent, because encoding and decoding JSON
// is most of the test's time under -race; the rules read nothing the
// alternatives would add.
func (w *weekTraffic) body() (req weekRequest) {
	r := w.rng
	u := r.Float64()
	lang := weekLanguages[len(weekLanguages)-1].lang
	for _, l := range weekLanguages {
		if u < l.below {
			lang = l.lang
			break
		}
	}
	v := weekVocab[lang]
	var sb strings.Builder
	for i := range max(3, int(20+6*r.NormFloat64())) {
		if i > 0 && lang != "zh" {
			sb.WriteByte(' ')
		}
		sb.WriteString(v[r.IntN(len(v))])
		if r.IntN(12) == 0 {
			sb.WriteString(", " + strconv.Itoa(r.IntN(1000)))
		}
	}
	sb.WriteByte('.')
	if r.Float64() < 0.05 {
		sb.WriteString("\n```go\nfmt.Println(" + strconv.Itoa(r.IntN(100)) + ")\n```")
	}
	text := sb.String()
	content, err := json.Marshal(text)
	if err != nil {
		w.t.Fatal(err)
	}
	chars := utf8.RuneCountInString(text)
	msgs := `{"role":"user","content":` + string(content) + `}`
	if r.Float64() < 0.3 {
		const system = "You are a helpful assistant."
		msgs = `{"role":"system","content":"` + system + `"},` + msgs
		chars += len(system)
	}
	// The simulator counts ceil(characters/4) prompt tokens and generates
	// exactly max_tokens, as its usage reports.
	req.promptTokens = (chars + 3) / 4
	req.stream = r.Float64() < 0.75
	extra := ""
	if req.stream {
		extra = `,"stream":true,"stream_options":{"include_usage":true}`
	}
	req.maxTokens = []int{3, 4, 5}[r.IntN(3)]
	temp := []string{"0.2", "0.7", "1"}[r.IntN(3)]
	req.msgs = msgs
	req.body = fmt.Appendf(nil, `{"model":"m","messages":[%s],"max_tokens":%d,"temperature":%s,"logprobs":true%s}`,
		msgs, req.maxTokens, temp, extra)
	return req
}

// weekRequest is one request of weekTraffic.
type weekRequest struct {
	msgs         string // the messages array's members
	body         []byte
	stream       bool
	maxTokens    int
	promptTokens int
}

// lognormal draws from a log-normal distribution with the given median.
func (w *weekTraffic) lognormal(median time.Duration, sigma float64) time.Duration {
	return time.Duration(float64(median) * math.Exp(sigma*w.rng.NormFloat64()))
}

// send makes one request that ends now and hands it to the pipeline as the
// gateway's dispatcher does: OnRequest, the SSE data payloads of a stream
// through OnEvent, then OnResponse.
func (w *weekTraffic) send() {
	w.requests++
	q := w.body()
	rec := httptest.NewRecorder()
	w.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(q.body)))
	out := rec.Body.Bytes()

	resp := &exchange.Response{Status: rec.Code}
	var events [][]byte
	switch {
	case rec.Code >= 500: // error_rate draws a 500
		w.errors++
		resp.ErrorClass = exchange.ClassUpstream5xx // how the gateway classes a 5xx
		resp.Latency = w.lognormal(20*time.Millisecond, 0.5)
		resp.Body = out
	case rec.Code != http.StatusOK:
		w.t.Fatalf("simulator answered %d: %s", rec.Code, out)
	case q.stream:
		w.streams++
		for line := range bytes.Lines(out) {
			data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\n"), []byte("data: "))
			if ok && !bytes.Equal(data, []byte("[DONE]")) { // the gateway's tap keeps [DONE] from observers
				events = append(events, data)
			}
		}
		resp.Events = len(events) + 1
	default:
		resp.Body = out
	}
	if rec.Code == http.StatusOK {
		resp.PromptTokens, resp.CompletionTokens = q.promptTokens, q.maxTokens
		// TTFT: log-normal, growing with the prompt; then a per-response
		// log-normal inter-token latency.
		ttft := w.lognormal(150*time.Millisecond, 0.4) + time.Duration(resp.PromptTokens)*200*time.Microsecond
		if w.ttftScale > 0 {
			ttft = time.Duration(float64(ttft) * w.ttftScale)
		}
		itl := w.lognormal(25*time.Millisecond, 0.25)
		resp.Latency = ttft + time.Duration(q.maxTokens-1)*itl
		if q.stream {
			resp.TTFT = ttft
			// The gaps the gateway would measure, drawn from nothing
			// more so that the week's random sequence stays the same.
			if q.maxTokens > 1 {
				resp.Gaps = exchange.Gaps{Count: q.maxTokens - 1, P50: itl, P95: itl * 13 / 10, Max: 2 * itl}
			}
		}
	}
	r := &exchange.Request{Route: "/v1/chat/completions", Operation: "chat", Model: "m", Backend: "fp16",
		Stream: q.stream, Start: w.now.Add(-resp.Latency), Body: q.body}
	w.p.OnPrompt(r.Start, r.Operation, r.Body)
	w.p.OnRequest(r)
	for _, e := range events {
		w.p.OnEvent(r, e)
	}
	w.p.OnResponse(r, resp)
	if rec.Code == http.StatusOK && w.rng.Float64() < weekShadowRatio {
		w.shadow(q)
	}
}

// weekShadowRatio is the share of successful requests shadow-compared.
const weekShadowRatio = 0.1

// shadow compares int8 with fp16 on a greedy copy of q, as the gateway's
// shadow workers do (16 tokens, 5 alternatives), unless either fails.
func (w *weekTraffic) shadow(q weekRequest) {
	body := fmt.Appendf(nil, `{"model":"m","messages":[%s],"max_tokens":16,"temperature":0,"n":1,"stream":false,"logprobs":true,"top_logprobs":5}`, q.msgs)
	var out [2][]byte
	for i, h := range []http.Handler{w.int8, w.h} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			return
		}
		out[i] = rec.Body.Bytes()
	}
	w.p.OnShadow(&exchange.Shadow{Backend: "int8", Reference: "fp16", Operation: "chat", Time: w.now, BackendBody: out[0], ReferenceBody: out[1]})
}

// recordingNotifier is a Notifier that keeps what it is asked to deliver.
type recordingNotifier struct {
	mu   sync.Mutex
	sent []alert.Notification
}

func (n *recordingNotifier) Notify(_ context.Context, ns []alert.Notification) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sent = append(n.sent, ns...)
	return nil
}

func (n *recordingNotifier) notifications() []alert.Notification {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.sent)
}

// weekSignalValues are the rule values that ObserveAlerts derives from s
// (all but the error rate, which the pipeline counts per period), so that
// the test can tell which rules had a value in a period.
func weekSignalValues(s *Signals) map[string]alert.Value {
	vals := gatewayValues(s)
	for i := range s.Segments { // one model: its segment's
		g := &s.Segments[i]
		maps.Copy(vals, alert.Values(alert.Signals{Confidence: g.Confidence, Output: g.Output, Latency: g.Latency}))
	}
	if pr := s.Precision; pr != nil && len(pr.Pairs) == 1 && pr.Pairs[0].State != precision.StateUnknown {
		vals[alert.RulePrecision] = alert.Value{V: float64(pr.Pairs[0].KL)}
	}
	return vals
}

// TestStationaryWeekAlerts checks "a simulated week of
// stationary traffic (accelerated clock) raises none", end to end: a
// stationary mix of chat requests (weekTraffic.body) goes to the simulator
// (default logprobs, error_rate 1%), with log-normal TTFT and inter-token
// latencies, and 10% of the successful ones are shadow-compared between a
// quantized copy of the simulator (logit noise 0.05) and the simulator
// itself (precision.min_tokens 32 for these few); a real Pipeline with the default alert settings evaluates every
// alert period (5 minutes) of a fake clock, and its engine delivers to a
// recording notifier. After a two-hour warm-up, in which every signal leaves
// "unknown" and every adaptive threshold (P95 of the rule's history × 1.1,
// from 12 periods on) starts to apply, a week of periods (2016) must bring
// no alert to firing and deliver nothing. Pending alerts (one or two breaching
// periods) are expected, a threshold being a percentile of the rule's own
// history: the periods of the week in which each rule was pending are
// counted and logged with -v, with those in which it had a value, which must
// be nearly all of them or the week proves nothing.
//
// The traffic is what -race affords: 0.08 requests per second of simulated
// time (Poisson, 24 per period on average, about 49,000 in all, 3 in 4
// streamed, and 2,400 shadow comparisons; about 55 s with -race on two
// cores, 7 s without). For the signals to be known with so few,
// analyzers.min_requests is 30 (default 300; 30 requests hold the 20
// streamed ones a TTFT P95 needs, alert.MinQuantileValues), so that a
// current window holds little more than one period of traffic, as it does
// with the default at one request per second: consecutive periods see
// mostly different requests. Windows this small make the
// values noisier than in production (drift scores of 0.2 to 2.6 rather than
// 0.02 to 0.15); the thresholds adapt to that. Two more settings differ
// from the defaults, for time only: analyzers.bucket is 1m (10s: six times
// the buckets to merge; the spans of windows and references are the
// defaults), and the drift signal's joint (Mahalanobis) test is off, since
// its FastMCD fit every period would double the time; with 30-odd prompts
// per window the per-feature PSIs set the drift score, and this week's
// values are the same with the joint test on. The analyzers are evaluated
// once per alert period, just before ObserveAlerts, rather than every
// analyzers.interval: the alert values depend only on the windows at that
// moment. The simulator's handler is called in process
// (httptest.NewRecorder, no sockets): a loopback round trip per request
// would cost more than the rest under -race, and the HTTP path is not what
// this test is about.
func TestStationaryWeekAlerts(t *testing.T) {
	testutil.SkipStatisticalUnderRace(t)
	if testing.Short() {
		t.Skip("-short: the simulated week (2016 alert periods, ~49,000 requests through the simulator and the pipeline) is left out")
	}
	const (
		rate   = 0.08 // requests per second of simulated time
		warmup = 2 * time.Hour
		week   = 7 * 24 * time.Hour
	)
	cfg := config.Default()
	cfg.Analyzers.MinRequests = 30
	cfg.Analyzers.Bucket = time.Minute
	cfg.Analyzers.Drift.Mahalanobis = false
	cfg.Analyzers.Precision.MinTokens = 32 // about 7 comparisons of 16 tokens in a 15-minute window
	if err := cfg.Analyzers.Validate(); err != nil {
		t.Fatal(err)
	}
	// Backend int8 is a quantized copy of its reference fp16: the same
	// seed, a little noise on its logits. The reference's simulator answers
	// the clients' traffic (a noisy simulator draws 20 alternatives per
	// token, which -race makes slow); the shadow comparisons are those the
	// gateway makes for int8's requests, so precision divergence is
	// stationary too.
	k := sim.DefaultKnobs()
	k.ErrorRate = 0.01
	seed, step := weekOptions(t)
	ref := sim.New(sim.Options{Model: "m", Seed: int64(seed), Knobs: k})
	k.Noise = 0.05
	int8 := sim.New(sim.Options{Model: "m", Seed: int64(seed), Knobs: k})
	start := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC) // on a period boundary
	w := &weekTraffic{t: t, rng: rand.New(rand.NewPCG(seed, seed+1)), h: ref.Handler(), int8: int8.Handler(), now: start}
	rec := &recordingNotifier{}
	p, err := New(Options{Config: cfg.Analyzers, Now: func() time.Time { return w.now },
		Log: slog.New(slog.DiscardHandler), Alerts: cfg.Alerts, Notifier: rec,
		Backends: []config.Backend{{Name: "int8", Models: []string{"m"}, Reference: "fp16"}, {Name: "fp16", Models: []string{"m"}}}})
	if err != nil {
		t.Fatal(err)
	}
	w.p = p
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	delivered := make(chan struct{})
	go func() { defer close(delivered); p.alerts.Run(ctx) }()

	period := cfg.Alerts.Period
	measured := start.Add(warmup)
	end := measured.Add(week)
	var (
		periods, weekPeriods   int
		periodReqs, periodErrs int                                  // this period's requests; errors before it
		valued, pending        = map[string]int{}, map[string]int{} // periods with a value, pending
		lo, hi                 = map[string]float64{}, map[string]float64{}
		largest                = map[string]alert.Alert{} // the pending alert most above its threshold
		fired                  []alert.Alert              // each firing or silenced run once
	)
	// observe closes the period ending now.
	observe := func() {
		sig := p.Evaluate()
		p.ObserveAlerts(ctx)
		periods++
		vals := weekSignalValues(sig)
		if periodReqs > 0 {
			vals[alert.RuleErrorRate] = alert.Value{V: float64(w.errors-periodErrs) / float64(periodReqs)}
		}
		periodReqs, periodErrs = 0, w.errors
		if w.now.After(measured) {
			weekPeriods++
			for rule, v := range vals {
				if valued[rule] == 0 || v.V < lo[rule] {
					lo[rule] = v.V
				}
				if valued[rule] == 0 || v.V > hi[rule] {
					hi[rule] = v.V
				}
				valued[rule]++
			}
		}
		for _, a := range p.alerts.Alerts() {
			switch a.State {
			case alert.Pending:
				if !w.now.After(measured) {
					break
				}
				pending[a.Rule]++
				if l, ok := largest[a.Rule]; !ok || a.Value/a.Threshold > l.Value/l.Threshold {
					largest[a.Rule] = a
				}
			case alert.Firing, alert.Silenced:
				if !slices.ContainsFunc(fired, func(f alert.Alert) bool {
					return f.Rule == a.Rule && f.State == a.State && f.Since.Equal(a.Since)
				}) {
					fired = append(fired, a)
				}
			}
		}
	}
	// An injected step (VIGIL_WEEK_STEP) starts on the 7th day; its rules
	// must fire, and how long they took is logged.
	stepAt := measured.Add(6 * 24 * time.Hour)
	stepped := false
	// The first rule is the step's target; the others move with it (E2E
	// includes the TTFT).
	stepRules := map[string][]string{"ttft": {alert.RuleTTFT, alert.RuleE2E}, "errors": {alert.RuleErrorRate}}[step]
	detected := map[string]time.Duration{}
	next := start.Add(period)
	for {
		if step != "" && !stepped && !w.now.Before(stepAt) {
			stepped = true
			switch step {
			case "ttft":
				w.ttftScale = 1.5
			case "errors":
				k := ref.Knobs()
				k.ErrorRate = 0.2
				ref.SetKnobs(k)
			}
		}
		arrival := w.now.Add(time.Duration(w.rng.ExpFloat64() / rate * float64(time.Second)))
		for !arrival.Before(next) && next.Compare(end) <= 0 {
			w.now = next
			observe()
			next = next.Add(period)
		}
		if !arrival.Before(end) {
			break
		}
		w.now = arrival
		w.send()
		periodReqs++
	}
	cancel()
	<-delivered // Run delivers what was queued before it returns

	t.Logf("%d requests (%d streamed, %d errors) in %d periods, %d of them after the %v warm-up",
		w.requests, w.streams, w.errors, periods, weekPeriods, warmup)
	for _, rule := range weekRules {
		line := fmt.Sprintf("%-16s value in %d/%d periods", rule, valued[rule], weekPeriods)
		if valued[rule] > 0 {
			line += fmt.Sprintf(" in [%.4g, %.4g]", lo[rule], hi[rule])
		}
		line += fmt.Sprintf(", pending in %d", pending[rule])
		if a, ok := largest[rule]; ok {
			line += fmt.Sprintf(" (most above: %.4g against a threshold of %.4g, %v)", float64(a.Value), float64(a.Threshold), a.Since.Format(time.DateTime))
		}
		t.Log(line)
	}
	for _, a := range fired {
		if stepped && slices.Contains(stepRules, a.Rule) && !a.Since.Before(stepAt) {
			if _, ok := detected[a.Rule]; !ok || a.Since.Sub(stepAt) < detected[a.Rule] {
				detected[a.Rule] = a.Since.Sub(stepAt)
			}
			continue
		}
		t.Errorf("%s %s since %v: %.4g against a threshold of %.4g", a.Rule, a.State, a.Since.Format(time.DateTime), float64(a.Value), float64(a.Threshold))
	}
	if step != "" {
		for i, r := range stepRules {
			d, ok := detected[r]
			switch {
			case ok:
				t.Logf("step %q on day 7 (seed %d): %s fired %v later", step, seed, r, d)
			case i == 0:
				t.Errorf("step %q on day 7: %s never fired", step, r)
			default:
				t.Logf("step %q on day 7 (seed %d): %s did not fire", step, seed, r)
			}
		}
		return // the step's notifications and stats are expected
	}
	if ns := rec.notifications(); len(ns) > 0 {
		t.Errorf("%d notifications delivered, the first %v: %s", len(ns), ns[0].Labels, ns[0].Annotations["description"])
	}
	if st := p.alerts.Stats(); st != (alert.Stats{}) {
		t.Errorf("engine stats %+v, want all zero", st)
	}
	// Every rule must have run. The error rate has a value whenever a
	// request came; the signals whenever their windows held 20 requests.
	for _, rule := range weekRules {
		want := 95
		if rule == alert.RuleTTFT {
			// Its P95 needs 20 streamed responses (alert.MinQuantileValues)
			// in a window of about 30 requests, 3 in 4 of them streamed.
			want = 50
		}
		if valued[rule] < weekPeriods*want/100 {
			t.Errorf("%s had a value in %d of %d periods, want at least %d%%", rule, valued[rule], weekPeriods, want)
		}
	}
}

// weekOptions reads the week's seed (VIGIL_WEEK_SEED, default 11) and an
// optional step to inject on its 7th day (VIGIL_WEEK_STEP: "ttft", TTFT
// × 1.5; "errors", error rate 1 % → 20 %: 24 requests a period tell no less), for sweeps by hand:
//
//	for s in $(seq 1 20); do VIGIL_WEEK_SEED=$s go test -run TestStationaryWeekAlerts -v ./analyzers/; done
func weekOptions(t *testing.T) (seed uint64, step string) {
	seed = 11
	if v := os.Getenv("VIGIL_WEEK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("VIGIL_WEEK_SEED=%q: %v", v, err)
		}
		seed = n
	}
	step = os.Getenv("VIGIL_WEEK_STEP")
	if step != "" && step != "ttft" && step != "errors" {
		t.Fatalf("VIGIL_WEEK_STEP=%q: want ttft or errors", step)
	}
	return seed, step
}
