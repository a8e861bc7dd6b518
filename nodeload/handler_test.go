package nodeload

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fixtureSampler is a Sampler over the fixtures with one sample taken:
// cpu 0.5, mem 0.75, no GPU.
func fixtureSampler(t *testing.T) *Sampler {
	t.Helper()
	dir, setStat := procDir(t, "stat1", "meminfo")
	s := NewSampler(time.Second, WithProcRoot(dir), WithoutGPU())
	s.now = func() time.Time { return fixedTime }
	s.primeCPU()
	setStat("stat2")
	return s
}

type response struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, method, url, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, string(b)}
}

func decodeLoad(t *testing.T, r response) Load {
	t.Helper()
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, type %q, body %s; want 200 JSON", r.status, r.header.Get("Content-Type"), r.body)
	}
	var l Load
	if err := json.Unmarshal([]byte(r.body), &l); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return l
}

func TestHandler(t *testing.T) {
	s := fixtureSampler(t)
	srv := httptest.NewServer(Handler(s, false))
	defer srv.Close()

	if r := do(t, "GET", srv.URL+"/v1/load", ""); r.status != http.StatusServiceUnavailable ||
		r.header.Get("Retry-After") == "" || !strings.Contains(r.body, `"error":"no sample yet"`) {
		t.Errorf("before the first sample: %d %s, want 503 with Retry-After", r.status, r.body)
	}
	if r := do(t, "GET", srv.URL+"/healthz", ""); r.status != http.StatusOK {
		t.Errorf("healthz: %d", r.status)
	}

	s.sample()
	got := decodeLoad(t, do(t, "GET", srv.URL+"/v1/load", ""))
	if diff := cmp.Diff(Load{Time: fixedTime, CPU: 0.5, Mem: 0.75}, got); diff != "" {
		t.Errorf("GET /v1/load (-want +got):\n%s", diff)
	}

	r := do(t, "GET", srv.URL+"/metrics", "")
	for _, want := range []string{"vigil_node_cpu_utilization 0.5", "vigil_node_memory_utilization 0.75"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, r.body)
		}
	}
	if strings.Contains(r.body, "vigil_gpu_") {
		t.Errorf("/metrics has GPU series without a GPU:\n%s", r.body)
	}

	// Overrides are off unless asked for.
	for _, m := range []string{"PUT", "DELETE"} {
		if r := do(t, m, srv.URL+"/v1/load", `{"cpu":0.1}`); r.status != http.StatusForbidden || !strings.Contains(r.body, "--allow-override") {
			t.Errorf("%s without allowOverride: %d %s, want 403 naming the flag", m, r.status, r.body)
		}
	}
	if got := s.Load(); got.CPU != 0.5 {
		t.Errorf("a refused PUT changed the load: cpu %v", got.CPU)
	}
	if r := do(t, "POST", srv.URL+"/v1/load", `{}`); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/load: %d, want 405", r.status)
	}
}

func TestHandlerOverride(t *testing.T) {
	s := fixtureSampler(t)
	s.sample()
	srv := httptest.NewServer(Handler(s, true))
	defer srv.Close()
	url := srv.URL + "/v1/load"

	pinned := Load{Time: fixedTime, CPU: 0.5, Mem: 0.2, GPU: 0.9, GPUMem: 0.4, HasGPU: true}
	got := decodeLoad(t, do(t, "PUT", url, `{"cpu":0.5,"mem":0.2,"gpu":0.9,"gpu_mem":0.4}`))
	if diff := cmp.Diff(pinned, got); diff != "" {
		t.Errorf("PUT answer (-want +got):\n%s", diff)
	}
	s.sample() // a new sample does not undo the pin
	if diff := cmp.Diff(pinned, decodeLoad(t, do(t, "GET", url, ""))); diff != "" {
		t.Errorf("GET while pinned (-want +got):\n%s", diff)
	}
	if r := do(t, "GET", srv.URL+"/metrics", ""); !strings.Contains(r.body, "vigil_node_memory_utilization 0.2") {
		t.Errorf("/metrics does not show the pinned mem:\n%s", r.body)
	}

	bad := []struct{ name, body, want string }{
		{"out of range", `{"cpu":1.5}`, "cpu: 1.5 is not in [0,1]"},
		{"unknown key", `{"cpu":0.1,"gpu_util":0.3}`, "gpu_util"},
		{"nothing set", `{}`, "set at least one"},
		{"not JSON", `cpu=0.1`, "bad override body"},
		{"too large", `{"cpu":0.1` + strings.Repeat(" ", maxOverrideBody) + `}`, "too large"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, "PUT", url, tt.body)
			if r.status/100 != 4 || !strings.Contains(r.body, tt.want) {
				t.Errorf("%d %s, want 4xx containing %q", r.status, r.body, tt.want)
			}
		})
	}
	if diff := cmp.Diff(pinned, s.Load()); diff != "" {
		t.Errorf("a rejected PUT changed the pin (-want +got):\n%s", diff)
	}

	if r := do(t, "DELETE", url, ""); r.status != http.StatusNoContent {
		t.Errorf("DELETE: %d %s, want 204", r.status, r.body)
	}
	got = decodeLoad(t, do(t, "GET", url, ""))
	if diff := cmp.Diff(Load{Time: fixedTime, CPU: 0.5, Mem: 0.75}, got); diff != "" {
		t.Errorf("GET after DELETE (-want +got):\n%s", diff)
	}
	if !strings.Contains(do(t, "GET", url, "").body, `"has_gpu":false`) || strings.Contains(do(t, "GET", url, "").body, `"gpu":`) {
		t.Error("after DELETE the gpu fields should be gone again")
	}
}
