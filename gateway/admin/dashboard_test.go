package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// The page and every asset it links are served without the admin token,
// with fixed content types, and revalidated by ETag.
func TestDashboardServed(t *testing.T) {
	gw := startAPI(t, Options{Token: "s3cret"})

	resp, page := testutil.GetResp(t, gw.URL+"/dashboard")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/dashboard: %d", resp.StatusCode)
	}
	for h, want := range map[string]string{
		"Content-Type":           "text/html; charset=utf-8",
		"Cache-Control":          "no-cache",
		"X-Content-Type-Options": "nosniff",
	} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("/dashboard %s = %q, want %q", h, got, want)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("/dashboard Content-Security-Policy = %q", csp)
	}
	if !bytes.Contains(page, []byte("<title>Vigil</title>")) {
		t.Errorf("/dashboard body has no title:\n%s", page)
	}

	// The page links exactly these assets, all served.
	var linked []string
	for _, m := range regexp.MustCompile(`(?:src|href)="(/dashboard/assets/[^"]+)"`).FindAllSubmatch(page, -1) {
		linked = append(linked, string(m[1]))
	}
	wantLinked := []string{
		"/dashboard/assets/vendor/uPlot.min.css",
		"/dashboard/assets/dashboard.css",
		"/dashboard/assets/vendor/uPlot.iife.min.js",
		"/dashboard/assets/dashboard.js",
	}
	if diff := cmp.Diff(wantLinked, linked); diff != "" {
		t.Errorf("assets linked from the page (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		path, contentType string
	}{
		{"/dashboard/assets/dashboard.js", "text/javascript; charset=utf-8"},
		{"/dashboard/assets/dashboard.css", "text/css; charset=utf-8"},
		{"/dashboard/assets/vendor/uPlot.iife.min.js", "text/javascript; charset=utf-8"},
		{"/dashboard/assets/vendor/uPlot.min.css", "text/css; charset=utf-8"},
		{"/dashboard/assets/vendor/LICENSE", "text/plain; charset=utf-8"},
		{"/dashboard/assets/vendor/README.md", "text/markdown; charset=utf-8"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, body := testutil.GetResp(t, gw.URL+tc.path)
			if resp.StatusCode != http.StatusOK || len(body) == 0 {
				t.Fatalf("status %d, %d bytes", resp.StatusCode, len(body))
			}
			if got := resp.Header.Get("Content-Type"); got != tc.contentType {
				t.Errorf("Content-Type = %q, want %q", got, tc.contentType)
			}
			etag := resp.Header.Get("ETag")
			if resp.Header.Get("Cache-Control") != "no-cache" || etag == "" {
				t.Errorf("Cache-Control %q, ETag %q: want no-cache and an ETag", resp.Header.Get("Cache-Control"), etag)
			}
			if resp, _ := testutil.GetResp(t, gw.URL+tc.path, "If-None-Match", etag); resp.StatusCode != http.StatusNotModified {
				t.Errorf("with If-None-Match: status %d, want 304", resp.StatusCode)
			}
		})
	}

	for _, p := range []string{"/dashboard/assets/nope.js", "/dashboard/assets/", "/dashboard/assets/../dashboard.go", "/dashboard/assets/vendor"} {
		if resp, _ := testutil.GetResp(t, gw.URL+p); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", p, resp.StatusCode)
		}
	}

	// The data behind the page still needs the token.
	if resp, _ := testutil.GetResp(t, gw.URL+"/admin/backends"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/admin/backends without a token: %d, want 401", resp.StatusCode)
	}
	if resp, _ := testutil.GetResp(t, gw.URL+"/admin/backends", "Authorization", "Bearer s3cret"); resp.StatusCode != http.StatusOK {
		t.Errorf("/admin/backends with the token: %d, want 200", resp.StatusCode)
	}
}

// The vendored uPlot is the pinned release, with its license.
func TestDashboardVendoredUPlot(t *testing.T) {
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"vendor/uPlot.iife.min.js", []string{"/*! https://github.com/leeoniya/uPlot (v1.6.32) */", "var uPlot="}},
		{"vendor/uPlot.min.css", []string{".uplot"}},
		{"vendor/LICENSE", []string{"The MIT License", "Leon Sorokin"}},
		{"vendor/README.md", []string{"uplot@1.6.32"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, ok := dashboardAssets[tc.name]
			if !ok {
				t.Fatalf("%s is not embedded", tc.name)
			}
			for _, w := range tc.want {
				if !bytes.Contains(f.body, []byte(w)) {
					t.Errorf("%s lacks %q", tc.name, w)
				}
			}
		})
	}
}

// The page carries the ids a browser test relies on, and its script sends
// the fragment's token with every admin fetch.
func TestDashboardContract(t *testing.T) {
	page := string(dashboardHTML)
	for _, id := range []string{
		"tile-drift", "tile-confidence", "tile-latency", "tile-output", "tile-precision",
		"chart-drift", "chart-confidence", "chart-output", "chart-latency", "chart-precision",
		"chart-backends-weight", "chart-backends-load", "chart-backends-prefix", "chart-calibration",
		"backends", "alerts", "notifications", "model", "model-rows",
	} {
		if !strings.Contains(page, `id="`+id+`"`) {
			t.Errorf("the page has no element with id %q", id)
		}
	}
	if n := strings.Count(page, "data-state="); n != 5 {
		t.Errorf("%d tiles with data-state, want 5", n)
	}
	js := string(dashboardAssets["dashboard.js"].body)
	for _, w := range []string{
		`location.hash`, `params.get("token")`, `Authorization: "Bearer " + token`, `fetch(path, { headers`,
		`"/admin/signals"`, `"/admin/backends"`, `"/admin/alerts"`, `"/admin/notifications"`, `"/admin/history?since="`,
		`window.vigilCharts = charts`, `tile.dataset.state = state`,
	} {
		if !strings.Contains(js, w) {
			t.Errorf("dashboard.js lacks %q", w)
		}
	}
	if strings.Contains(page, "<script>") {
		t.Error("the page has an inline script, which its Content-Security-Policy forbids")
	}
}

// chromium finds a headless Chromium: $VIGIL_CHROMIUM, else chromium on
// the PATH (test/run installs Debian's). Without one the test is skipped.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("VIGIL_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on the PATH (./test/run installs Debian's); set VIGIL_CHROMIUM")
	return ""
}

// staticSignals serves a fixed /admin/signals document, which a test may
// swap while the page polls; ?model= finds the model's segment, else
// "other", in it.
type staticSignals struct{ doc atomic.Pointer[string] }

func newStaticSignals(doc string) *staticSignals {
	s := &staticSignals{}
	s.doc.Store(&doc)
	return s
}

func (s *staticSignals) SignalsJSON(context.Context) ([]byte, error) {
	return []byte(*s.doc.Load()), nil
}

func (s *staticSignals) SegmentJSON(_ context.Context, model string) ([]byte, bool, error) {
	var d struct {
		Segments []json.RawMessage `json:"segments"`
	}
	if err := json.Unmarshal([]byte(*s.doc.Load()), &d); err != nil {
		return nil, false, err
	}
	for _, name := range []string{model, "other"} {
		for _, seg := range d.Segments {
			var m struct {
				Model string `json:"model"`
			}
			if json.Unmarshal(seg, &m) == nil && m.Model == name {
				return seg, true, nil
			}
		}
	}
	return nil, false, nil
}

// staticAlerts serves a fixed /admin/alerts array.
type staticAlerts string

func (a staticAlerts) AlertsJSON(context.Context) ([]byte, error) { return []byte(a), nil }

// twoModels is a signals document with two segments, worst first: "small"
// in alarm (confidence), and the adapter "sql" without a verdict. The
// fleet's signals are ok.
const twoModels = `{
 "window": {"start": "2026-12-01T10:00:00Z", "end": "2026-12-01T10:15:00Z", "requests": 424},
 "evaluated": "2026-12-01T10:15:00Z",
 "drift": {"state": "ok", "score": 0.02, "reference": "rolling", "current_requests": 424, "reference_requests": 900, "features": []},
 "confidence": {"state": "ok", "confidence": 0.8, "mean_logprob": -0.3, "drop": 0.01, "responses": 400},
 "latency": {"state": "ok", "metrics": {"ttft": {"p95": 120}, "e2e": {"p95": 900}}, "responses": 400},
 "output": {"state": "ok", "perplexity": 1.4, "baseline_mean": 1.4, "baseline_std": 0.05},
 "precision": {"state": "unknown"},
 "segments": [
  {"model": "small", "state": "alarm", "alarms": ["confidence"], "requests": 412, "error_rate": 0.01,
   "drift": {"state": "ok", "score": 0.04, "reference": "rolling", "current_requests": 412, "reference_requests": 880, "features": []},
   "confidence": {"state": "decay", "confidence": 0.41, "mean_logprob": -0.9, "drop": 0.22, "responses": 400},
   "latency": {"state": "ok", "ttft_ms": {"p50": 80, "p95": 120, "p99": 150}, "e2e_ms": {"p50": 700, "p95": 900, "p99": 990}, "metrics": {"ttft": {"p95": 120}, "e2e": {"p95": 900}}, "responses": 400},
   "output": {"state": "unknown", "perplexity": 1.6, "baseline_mean": null, "baseline_std": null, "reason": "the baseline holds 3 minutes with responses; 10 needed"}},
  {"model": "sql", "base_model": "big", "state": "unknown", "reason": "too little traffic for a verdict: 12 requests in the last 15m0s",
   "requests": 12, "error_rate": null,
   "drift": {"state": "unknown"}, "confidence": {"state": "unknown"}, "latency": {"state": "unknown"}, "output": {"state": "unknown"}}
 ],
 "thresholds": []
}`

// modelsView is what the page shows of the models, read from the DOM.
type modelsView struct {
	Rows          []modelRowView    `json:"rows"`
	Options       []string          `json:"options"` // value=text
	Selected      string            `json:"selected"`
	SectionHidden bool              `json:"sectionHidden"`
	PickerHidden  bool              `json:"pickerHidden"`
	Tiles         map[string]string `json:"tiles"` // the main tiles: signal → data-state
	Confidence    string            `json:"confidence"`
	Scope         string            `json:"scope"` // the scope line, "" while hidden
	Hash          string            `json:"hash"`
}

type modelRowView struct {
	Model  string            `json:"model"`
	State  string            `json:"state"`
	Name   string            `json:"name"`   // the button's text
	Reason string            `json:"reason"` // why the state is unknown
	Tiles  map[string]string `json:"tiles"`  // data-signal → data-state
	Note   string            `json:"note"`   // the firing alert's note on the confidence tile
}

// readModels returns the page's modelsView once ready() holds, else null
// (for chromedp.Poll).
const readModels = `(() => {
  const $ = id => document.getElementById(id);
  const v = {
    rows: [...document.querySelectorAll("#model-rows .model-row")].map(r => ({
      model: r.dataset.model, state: r.dataset.state,
      name: r.querySelector(".model-name button").textContent,
      reason: (r.querySelector(".model-name .reason") || {}).textContent || "",
      tiles: Object.fromEntries([...r.querySelectorAll(".tile.mini")].map(t => [t.dataset.signal, t.dataset.state])),
      note: (r.querySelector('[data-signal="confidence"] .alert-note') || {}).textContent || "",
    })),
    options: [...$("model").options].map(o => o.value + "=" + o.textContent),
    selected: $("model").value,
    sectionHidden: $("models").hidden, pickerHidden: $("model-pick").hidden,
    tiles: Object.fromEntries(["drift", "confidence", "latency", "output", "precision"].map(n => [n, $("tile-" + n).dataset.state])),
    confidence: $("tile-confidence").querySelector(".big").textContent,
    scope: $("scope").hidden ? "" : $("scope").textContent,
    hash: location.hash,
  };
  return (%s) ? v : null;
})()`

// The page lists the models of the signals' segments in the selector and
// as rows of compact tiles, worst first, each tile in its signal's state;
// choosing a model shows its signals in the main tiles; a gateway that
// sends no segments gets the fleet's page without them.
func TestDashboardModelsInBrowser(t *testing.T) {
	bin := chromium(t)
	sigs := newStaticSignals(twoModels)
	alerts := staticAlerts(`[{"name": "ConfidenceDrop", "rule": "confidence_drop", "state": "firing", "since": "2026-12-01T10:10:00Z",
  "value": 0.22, "threshold": 0.1, "labels": {"model": "small", "signal": "confidence"}}]`)
	gw := startAPI(t, Options{Signals: sigs, Alerts: alerts})

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-background-networking", true),
		chromedp.WindowSize(1400, 1000))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	var mu sync.Mutex
	var problems []string
	bctx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithListener(func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg := ev.ExceptionDetails.Text
			if e := ev.ExceptionDetails.Exception; e != nil {
				msg += " " + e.Description
			}
			problems = append(problems, "exception: "+msg)
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				problems = append(problems, "console.error")
			}
		}
	}))
	defer cancelBrowser()

	// wait returns the page's view once cond (JavaScript over v) holds.
	wait := func(t *testing.T, cond string) modelsView {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Poll[modelsView](fmt.Sprintf(readModels, cond),
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(10*time.Second)))
		if err != nil {
			last, _ := chromedp.Run(bctx, chromedp.Evaluate[modelsView](fmt.Sprintf(readModels, "true")))
			t.Fatalf("waiting for %s: %v; the page shows %+v", cond, err, last)
		}
		return v
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(gw.URL+"/dashboard")); err != nil {
		t.Fatal(err)
	}

	t.Run("fleet", func(t *testing.T) {
		got := wait(t, `v.rows.length > 0`)
		want := modelsView{
			Rows: []modelRowView{
				{Model: "small", State: "alarm", Name: "small",
					Tiles: map[string]string{"drift": "ok", "confidence": "decay", "latency": "ok", "output": "unknown", "traffic": "ok"},
					Note:  "alert firing"},
				{Model: "sql", State: "unknown", Name: "sql (base: big)", Reason: "too little traffic for a verdict: 12 requests in the last 15m0s",
					Tiles: map[string]string{"drift": "unknown", "confidence": "unknown", "latency": "unknown", "output": "unknown", "traffic": "unknown"}},
			},
			Options:    []string{"=All models", "small=small", "sql=sql (base: big)"},
			Tiles:      map[string]string{"drift": "ok", "confidence": "ok", "latency": "ok", "output": "ok", "precision": "unknown"},
			Confidence: "0.8",
			Hash:       "#range=15m",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the fleet's page (-want +got):\n%s", diff)
		}
	})

	t.Run("one model", func(t *testing.T) {
		pick := `(() => { const s = document.getElementById("model"); s.value = "small"; s.dispatchEvent(new Event("change")); })()`
		if err := chromedp.Do(bctx, chromedp.Evaluate[chromedp.Void](pick)); err != nil {
			t.Fatal(err)
		}
		got := wait(t, `v.selected === "small" && v.tiles.confidence === "decay"`)
		wantTiles := map[string]string{"drift": "ok", "confidence": "decay", "latency": "ok", "output": "unknown", "precision": "unknown"}
		if diff := cmp.Diff(wantTiles, got.Tiles); diff != "" {
			t.Errorf("small's tiles (-want +got):\n%s", diff)
		}
		if got.Confidence != "0.41" || !strings.HasPrefix(got.Scope, "Model small: 412 requests") || got.Hash != "#range=15m&model=small" {
			t.Errorf("small shown with confidence %q, scope %q, hash %q", got.Confidence, got.Scope, got.Hash)
		}

		// A click on a model's row shows that model.
		if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`#model-rows .model-row[data-model="sql"] button`))); err != nil {
			t.Fatal(err)
		}
		got = wait(t, `v.selected === "sql" && v.tiles.confidence === "unknown"`)
		if !strings.Contains(got.Scope, "sql (base: big): 12 requests") || !strings.Contains(got.Scope, "Too little traffic for a verdict") {
			t.Errorf("sql's scope line: %q", got.Scope)
		}
	})

	t.Run("no segments", func(t *testing.T) {
		// An older gateway: no "segments"; the page is the fleet's.
		var d map[string]any
		if err := json.Unmarshal([]byte(twoModels), &d); err != nil {
			t.Fatal(err)
		}
		delete(d, "segments")
		old, _ := json.Marshal(d)
		doc := string(old)
		sigs.doc.Store(&doc)
		if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`#scope button`))); err != nil {
			t.Fatal(err)
		}
		got := wait(t, `v.sectionHidden && v.pickerHidden && v.selected === ""`)
		want := modelsView{
			Rows: []modelRowView{}, Options: []string{"=All models"}, SectionHidden: true, PickerHidden: true,
			Tiles:      map[string]string{"drift": "ok", "confidence": "ok", "latency": "ok", "output": "ok", "precision": "unknown"},
			Confidence: "0.8", Hash: "#range=15m",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the page without segments (-want +got):\n%s", diff)
		}
	})

	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("the page logged: %v", problems)
	}
}
