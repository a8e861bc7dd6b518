package proctest

import (
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary act as the service under test: the
// value names the behaviour, see TestMain.
const helperEnv = "PROCTEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "serve": // serve 200 OK on os.Args[1] until SIGTERM
		_ = http.ListenAndServe(os.Args[1], http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	case "fail": // say why and exit before serving
		fmt.Fprintln(os.Stderr, "helper: bad config")
		os.Exit(3)
	case "hang": // never serve and ignore SIGTERM, so that only a kill stops it
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("helper: hanging")
		time.Sleep(time.Minute)
	}
	os.Exit(0)
}

// helper returns a Service that runs this test binary as helper kind.
func helper(t *testing.T, kind string, args ...string) Service {
	t.Setenv(helperEnv, kind)
	return Service{Name: "helper", Path: os.Args[0], Args: args, Env: os.Environ()}
}

func TestRunServesUntilCleanup(t *testing.T) {
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ports[0] + "/"
	t.Run("run", func(t *testing.T) {
		s := helper(t, "serve", ports[0])
		s.Ready = func() bool { return HTTPOK(url) }
		if err := Run(t, s); err != nil {
			t.Fatal(err)
		}
		if !HTTPOK(url) {
			t.Fatal("not serving after Run returned")
		}
	})
	if HTTPOK(url) {
		t.Error("still serving after the test's cleanup")
	}
}

func TestRunErrors(t *testing.T) {
	tests := []struct {
		name, kind string
		want       []string // substrings of the error
	}{
		{"exits early", "fail", []string{"helper exited before it was ready", "helper output:\nhelper: bad config"}},
		{"never ready", "hang", []string{"helper not ready after 200ms", "helper: hanging"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := helper(t, tt.kind)
			s.Ready = func() bool { return false }
			s.ReadyTimeout, s.StopGrace = 200*time.Millisecond, 100*time.Millisecond
			start := time.Now()
			err := Run(t, s)
			if err == nil {
				t.Fatal("Run succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			// The hanging helper ignores SIGTERM: Run must kill it after
			// StopGrace rather than wait for it. 5 s leaves room for a
			// slow machine and is far below the helper's minute.
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Run took %v", d)
			}
		})
	}
}

func TestFreePortsDistinct(t *testing.T) {
	ports, err := FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range ports {
		if seen[p] || !strings.HasPrefix(p, "127.0.0.1:") {
			t.Errorf("ports %v: %s repeated or not on 127.0.0.1", ports, p)
		}
		seen[p] = true
	}
}

func TestLogBufferKeepsTail(t *testing.T) {
	b := &logBuffer{max: 8}
	for _, s := range []string{"0123", "4567", "89ab"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got, want := b.String(), "456789ab"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
