package demo

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// browser finds a headless Chromium: $VIGIL_CHROMIUM, else chromium on the
// PATH (test/run installs Debian's). Without one the test is skipped.
func browser(t *testing.T) string {
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

// dashboardState is what the page shows at one moment, read from the DOM
// and from window.vigilCharts.
type dashboardState struct {
	Tiles  map[string]string `json:"tiles"`  // signal → data-state
	Points map[string]int    `json:"points"` // chart id → data points
}

const readDashboard = `(() => {
  const tiles = {};
  for (const el of document.querySelectorAll('[id^="tile-"]')) tiles[el.id.slice(5)] = el.dataset.state || "";
  const points = {};
  for (const [id, u] of Object.entries(window.vigilCharts || {})) points[id] = u && u.data && u.data[0] ? u.data[0].length : 0;
  return {tiles, points};
})()`

// TestDashboardInBrowser loads the dashboard in headless Chromium while
// the incident scenario runs on compressed timings (its short variant):
// every time chart gets data points, the drift tile turns to "drift"
// during the drift phase and back after it, and the page logs no console
// error or exception. A screenshot (1400×1000, PNG) taken when a tile
// last turned to an alarm is saved in the test's temp dir, or at
// $VIGIL_DASHBOARD_SCREENSHOT.
func TestDashboardInBrowser(t *testing.T) {
	bin := browser(t)
	sc := newIncident(0.5, true)
	sc.untilDetected = true
	// Phases (f) and (g), a change of the mix of models and one model's
	// decay, add a minute and nothing the test reads.
	sc.phases = slices.DeleteFunc(sc.phases, func(p phase) bool { return p.label == "(f)" || p.label == "(g)" })
	// As TestScenarioShort's: each model has verdicts of its own, which
	// the warm-up waits for.
	d, err := New(Setup{Listen: "127.0.0.1:0", RPS: 24, Log: slog.New(slog.DiscardHandler), Timings: &sc.timings})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-background-networking", true),
		chromedp.WindowSize(1400, 1000))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	var mu sync.Mutex
	var consoleErrors []string
	bctx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithListener(func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			consoleErrors = append(consoleErrors, "exception: "+ev.ExceptionDetails.Text)
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value))
				}
				consoleErrors = append(consoleErrors, "console.error: "+strings.Join(parts, " "))
			}
		}
	}))
	defer cancelBrowser()

	var states []string // the drift tile's states, in order, without repeats
	var shot []byte     // a screenshot when a tile last turned to an alarm
	alarm := map[string]bool{"drift": true, "decay": true, "anomalous": true, "divergent": true}
	var last dashboardState
	err = d.Serve(ctx, func(ctx context.Context) error {
		defer cancel()
		if err := chromedp.Do(bctx, chromedp.Navigate(d.base+"/dashboard")); err != nil {
			return err
		}
		story := make(chan error, 1)
		storyCtx, stopStory := context.WithCancel(ctx)
		defer stopStory()
		go func() {
			_, err := sc.tell(storyCtx, d, io.Discard, 1)
			story <- err
		}()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case err := <-story:
				return err
			case <-tick.C:
			}
			st, err := chromedp.Run(bctx, chromedp.Evaluate[dashboardState](readDashboard))
			if err != nil {
				return err
			}
			// A tile newly in alarm: a screenshot mid-incident (the last
			// one, with the most history, is kept).
			for sig, s := range st.Tiles {
				if alarm[s] && last.Tiles[sig] != s {
					if png, err := chromedp.Run(bctx, chromedp.CaptureScreenshot()); err == nil {
						shot = png
					}
				}
			}
			last = st
			if s := st.Tiles["drift"]; len(states) == 0 || states[len(states)-1] != s {
				states = append(states, s)
			}
		}
	})
	if err != nil && ctx.Err() == nil {
		t.Fatalf("scenario: %v", err)
	}
	if shot != nil {
		// VIGIL_DASHBOARD_SCREENSHOT=docs/dashboard.png keeps it (the README's).
		path := os.Getenv("VIGIL_DASHBOARD_SCREENSHOT")
		if path == "" {
			path = filepath.Join(t.TempDir(), "dashboard.png")
		}
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Errorf("screenshot: %v", err)
		} else {
			t.Logf("screenshot mid-incident: %s", path)
		}
	}

	t.Logf("drift tile states: %v; chart points: %v", states, last.Points)
	for _, id := range []string{"chart-drift", "chart-confidence", "chart-output", "chart-latency", "chart-precision", "chart-backends-weight"} {
		if last.Points[id] < 2 {
			t.Errorf("%s has %d data points, want a history", id, last.Points[id])
		}
	}
	i := slices.Index(states, "drift")
	if i < 0 {
		t.Errorf("the drift tile never showed drift: %v", states)
	} else if !slices.Contains(states[i+1:], "ok") {
		t.Errorf("the drift tile did not come back to ok after the drift phase: %v", states)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(consoleErrors) > 0 {
		t.Errorf("console errors: %v", consoleErrors)
	}
}
