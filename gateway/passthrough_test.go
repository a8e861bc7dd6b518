package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
)

// echoBackend is a backend that answers every request with a body of its
// own naming what it saw, headers of its own, and records the requests.
type echoBackend struct {
	*httptest.Server
	name string
	mu   sync.Mutex
	seen []string // "METHOD URI body"
}

func startEcho(t *testing.T, name string) *echoBackend {
	t.Helper()
	e := &echoBackend{name: name}
	e.Server = httptest.NewServer(e.handler())
	t.Cleanup(e.Close)
	return e
}

// handler answers as the echo backend e does.
func (e *echoBackend) handler() http.Handler {
	name := e.name
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.seen = append(e.seen, r.Method+" "+r.URL.RequestURI()+" "+string(b))
		e.mu.Unlock()
		if r.URL.Path == "/missing" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"detail":"Not Found"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("X-Backend-Own", name)
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		fmt.Fprintf(w, `{"backend":%q,"path":%q, "len":%d}`, name, r.URL.Path, len(b))
	})
}

func (e *echoBackend) requests() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.seen...)
}

// do sends a request and returns the response with its whole body.
func do(t *testing.T, method, url, contentType string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
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
	return resp, b
}

// accessLine returns the access log line of the request with id, waiting
// for it.
func accessLine(t *testing.T, gw *testGateway, id string) map[string]any {
	t.Helper()
	var line map[string]any
	waitFor(t, "the access log line of "+id, func() bool {
		for _, l := range gw.access.lines(t) {
			if l["request_id"] == id {
				line = l
				return true
			}
		}
		return false
	})
	return line
}

// TestPassThroughAnyPath: paths the gateway does not know reach a backend
// with their method, query and body, and the answer comes back byte for
// byte with the backend's headers; the access log names the path and a
// bounded route.
func TestPassThroughAnyPath(t *testing.T) {
	_, simURL := startSim(t, "m1", nil)
	echo := startEcho(t, "e")
	gw := startGateway(t, []config.Backend{backend("e", echo.URL)}, nil)
	for _, tc := range []struct {
		method, path, body, route string
	}{
		{"POST", "/detokenize", `{"model":"m1","tokens":[1,2]}`, "/detokenize"},
		{"POST", "/tokenize", `{"model":"m1","prompt":"hi"}`, "/tokenize"},
		{"POST", "/foo?x=1", `{"a":1}`, "/*"},
		{"GET", "/foo/bar", ``, "/*"},
		{"POST", "/v2/rerank", `{"query":"q","documents":["a"]}`, "/v2/rerank"},
		{"POST", "/inference/v1/generate", `{"token_ids":[1]}`, "/inference/v1/generate"},
		{"DELETE", "/v1/files/abc", ``, "/v1/*"},
		{"POST", "/missing", `{}`, "/*"},
	} {
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		resp, got := do(t, tc.method, gw.URL+tc.path, "application/json", body)
		var want []byte
		var wantStatus int
		{
			var b io.Reader
			if tc.body != "" {
				b = strings.NewReader(tc.body)
			}
			r, w := do(t, tc.method, echo.URL+tc.path, "application/json", b)
			want, wantStatus = w, r.StatusCode
			if wantStatus == 200 && r.Header.Get("X-Backend-Own") != "e" {
				t.Fatal("the echo backend lost its header")
			}
		}
		if resp.StatusCode != wantStatus || string(got) != string(want) {
			t.Errorf("%s %s: %d %s, want %d %s", tc.method, tc.path, resp.StatusCode, got, wantStatus, want)
		}
		if resp.Header.Get("X-Vigil-Backend") != "e" {
			t.Errorf("%s %s: X-Vigil-Backend %q", tc.method, tc.path, resp.Header.Get("X-Vigil-Backend"))
		}
		if wantStatus == 200 {
			if resp.Header.Get("X-Backend-Own") != "e" || resp.Header.Get("Content-Type") != "application/json; charset=utf-8" ||
				strings.Join(resp.Header.Values("Set-Cookie"), ",") != "a=1,b=2" {
				t.Errorf("%s %s: headers %v", tc.method, tc.path, resp.Header)
			}
		}
		reqs := echo.requests()
		// The gateway's request and the test's own direct one.
		if n := len(reqs); n < 2 || reqs[n-2] != reqs[n-1] || reqs[n-1] != tc.method+" "+tc.path+" "+tc.body {
			t.Errorf("%s %s: backend saw %q", tc.method, tc.path, reqs)
		}
		line := accessLine(t, gw, resp.Header.Get("X-Request-Id"))
		path, _, _ := strings.Cut(tc.path, "?")
		if line["route"] != tc.route || line["path"] != path || line["backend"] != "e" || line["status"] != float64(wantStatus) {
			t.Errorf("%s %s: access line %v", tc.method, tc.path, line)
		}
	}

	// The simulator's own /tokenize answer passes unchanged.
	gw2 := startGateway(t, []config.Backend{backend("s", simURL)}, nil)
	body := `{"model":"m1","prompt":"hello there"}`
	_, _, want := post(t, simURL+"/tokenize", body)
	code, h, got := post(t, gw2.URL+"/tokenize", body)
	if code != 200 || string(got) != string(want) || h.Get("X-Vigil-Backend") != "s" {
		t.Errorf("/tokenize through the simulator: %d %s, want %s", code, got, want)
	}
}

// TestPassThroughByModel: a pass-through request whose JSON body names a
// model goes to a backend serving it.
func TestPassThroughByModel(t *testing.T) {
	_, a := startSim(t, "alpha", nil)
	_, b := startSim(t, "beta", nil)
	gw := startGateway(t, []config.Backend{backend("a", a, "alpha"), backend("b", b, "beta")}, nil)
	for i := range 10 {
		model, want := "alpha", "a"
		if i%2 == 1 {
			model, want = "beta", "b"
		}
		code, h, body := post(t, gw.URL+"/tokenize", `{"model":"`+model+`","prompt":"x y z"}`)
		if code != 200 || h.Get("X-Vigil-Backend") != want {
			t.Fatalf("/tokenize for %s: %d from %q: %s", model, code, h.Get("X-Vigil-Backend"), body)
		}
	}
	// A model no backend serves is the gateway's 404, as on the known routes.
	code, h, body := post(t, gw.URL+"/tokenize", `{"model":"gamma","prompt":"x"}`)
	if code != 404 || h.Get("X-Vigil-Backend") != "" || !strings.Contains(string(body), `"code":"model_not_found"`) {
		t.Errorf("/tokenize for an unknown model: %d %s", code, body)
	}
}

// TestPassThroughAdminPaths: the paths that change a backend's state are
// refused unless passthrough.allow_admin_paths lets them through.
func TestPassThroughAdminPaths(t *testing.T) {
	echo := startEcho(t, "e")
	gw := startGateway(t, []config.Backend{backend("e", echo.URL)}, nil)
	for _, p := range append(append([]string(nil), config.AdminPaths...), "/sleep/", "//x/../wake_up", "/%73leep") {
		resp, body := do(t, http.MethodPost, gw.URL+p, "application/json", strings.NewReader(`{"lora_name":"x"}`))
		var e struct {
			Error struct{ Message, Type, Code string }
		}
		if resp.StatusCode != http.StatusForbidden || json.Unmarshal(body, &e) != nil || e.Error.Code != "path_not_allowed" ||
			e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, "passthrough.allow_admin_paths") ||
			!strings.Contains(e.Error.Message, cleanPath(resp.Request.URL.Path)) {
			t.Errorf("POST %s: %d %s", p, resp.StatusCode, body)
		}
		if line := accessLine(t, gw, resp.Header.Get("X-Request-Id")); line["status"] != float64(403) || line["backend"] != "" {
			t.Errorf("POST %s: access line %v", p, line)
		}
	}
	if reqs := echo.requests(); len(reqs) != 0 {
		t.Errorf("the backend saw refused requests: %q", reqs)
	}

	gw = startGateway(t, []config.Backend{backend("e", echo.URL)}, func(c *config.Config) {
		c.Passthrough.AllowAdminPaths = []string{"/sleep", "/v1/load_lora_adapter"}
	})
	for _, p := range []string{"/sleep", "/v1/load_lora_adapter"} {
		if code, _, body := post(t, gw.URL+p, `{}`); code != 200 || !strings.Contains(string(body), `"path":"`+p+`"`) {
			t.Errorf("allowed POST %s: %d %s", p, code, body)
		}
	}
	if code, _, _ := post(t, gw.URL+"/wake_up", `{}`); code != http.StatusForbidden {
		t.Errorf("POST /wake_up, not allowed: %d", code)
	}
}

// TestPassThroughOwnPaths: the gateway's own paths never reach a backend;
// an unknown one of them is the gateway's JSON 404.
func TestPassThroughOwnPaths(t *testing.T) {
	echo := startEcho(t, "e")
	gw := startGateway(t, []config.Backend{backend("e", echo.URL)}, nil)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/admin/nope"}, {"GET", "/admin"}, {"GET", "/metrics/x"}, {"GET", "/dashboard/x"},
		{"GET", "/debug/pprof/"}, {"POST", "/healthz"}, {"DELETE", "/readyz"}, {"POST", "/metrics"},
	} {
		resp, body := do(t, tc.method, gw.URL+tc.path, "", nil)
		var e struct{ Error struct{ Code string } }
		if resp.StatusCode != 404 || json.Unmarshal(body, &e) != nil || e.Error.Code != "not_found" ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %d %q %s", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	if reqs := echo.requests(); len(reqs) != 0 {
		t.Errorf("the backend saw the gateway's paths: %q", reqs)
	}
}

// zeros reads zero bytes forever.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// multipartBody is a multipart/form-data upload with a file of n bytes,
// made as it is read, and its content type.
func multipartBody(n int64) (io.Reader, string) { return multipartFor("whisper", n) }

// multipartFor is multipartBody for model.
func multipartFor(model string, n int64) (io.Reader, string) {
	const boundary = "vigil-test-boundary"
	head := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n" + model + "\r\n" +
		"--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n" +
		"Content-Type: application/octet-stream\r\n\r\n"
	tail := "\r\n--" + boundary + "--\r\n"
	return io.MultiReader(strings.NewReader(head), io.LimitReader(zeros{}, n), strings.NewReader(tail)),
		"multipart/form-data; boundary=" + boundary
}

// TestPassThroughUploadStreams: a multipart upload far larger than
// limits.max_body_bytes streams through to the backend without the
// gateway holding it.
func TestPassThroughUploadStreams(t *testing.T) {
	var got struct {
		mu     sync.Mutex
		n      int64
		ctype  string
		length int64
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseMultipartForm(1 << 20); err != nil { // spills the file to disk
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer r.MultipartForm.RemoveAll()
		f, _, err := r.FormFile("file")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n, _ := io.Copy(io.Discard, f)
		got.mu.Lock()
		got.n, got.ctype, got.length = n, r.Header.Get("Content-Type"), r.ContentLength
		got.mu.Unlock()
		fmt.Fprintf(w, `{"text":"%d bytes of %s"}`, n, r.FormValue("model"))
	}))
	defer up.Close()
	gw := startGateway(t, []config.Backend{backend("u", up.URL)}, func(c *config.Config) {
		c.Limits.MaxBodyBytes = 1 << 20
		c.Passthrough.MaxUploadBytes = 64 << 20
	})
	// A JSON body over limits.max_body_bytes is still refused.
	if code, _, body := post(t, gw.URL+"/v1/audio/transcriptions", `{"x":"`+strings.Repeat("a", 2<<20)+`"}`); code != 413 {
		t.Errorf("JSON over max_body_bytes: %d %s", code, body)
	}

	const size = 50 << 20
	for _, known := range []bool{false, true} {
		body, ct := multipartBody(size)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/audio/transcriptions", body)
		req.Header.Set("Content-Type", ct)
		if known { // with a Content-Length, else chunked
			b2, _ := multipartBody(size)
			n, _ := io.Copy(io.Discard, b2)
			req.ContentLength = n
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		runtime.ReadMemStats(&after)
		if resp.StatusCode != 200 || string(answer) != `{"text":"52428800 bytes of whisper"}` {
			t.Fatalf("upload (length known: %v): %d %s", known, resp.StatusCode, answer)
		}
		got.mu.Lock()
		if got.ctype != ct || (known && got.length != req.ContentLength) || (!known && got.length != -1) {
			t.Errorf("backend saw Content-Type %q, length %d", got.ctype, got.length)
		}
		got.mu.Unlock()
		// The bytes allocated in the whole process (the test's client and
		// backend included) while 50 MB went through: a gateway holding
		// the body would account for 50 MB at least.
		alloc := after.TotalAlloc - before.TotalAlloc
		if alloc > 20<<20 {
			t.Errorf("upload (length known: %v): %d MB allocated", known, alloc>>20)
		}
		t.Logf("upload of %d MB (length known: %v): %.1f MB allocated, heap %d → %d MB", size>>20, known,
			float64(alloc)/(1<<20), before.HeapAlloc>>20, after.HeapAlloc>>20)
		line := accessLine(t, gw, resp.Header.Get("X-Request-Id"))
		if line["route"] != "/v1/audio/transcriptions" || line["path"] != "/v1/audio/transcriptions" || line["attempts"] != float64(1) {
			t.Errorf("access line %v", line)
		}
	}

	// Past passthrough.max_upload_bytes: 413, told by the gateway, with or
	// without a length.
	small := startGateway(t, []config.Backend{backend("u", up.URL)}, func(c *config.Config) {
		c.Limits.MaxBodyBytes = 1 << 20
		c.Passthrough.MaxUploadBytes = 2 << 20
	})
	for _, known := range []bool{false, true} {
		body, ct := multipartBody(3 << 20)
		req, _ := http.NewRequest(http.MethodPost, small.URL+"/v1/audio/transcriptions", body)
		req.Header.Set("Content-Type", ct)
		if known {
			req.ContentLength = 3<<20 + 300 // about; the gateway refuses it on the header
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			if known {
				continue // the gateway may close before the client wrote it all
			}
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 || !strings.Contains(string(b), "passthrough.max_upload_bytes") {
			t.Errorf("upload over the bound (length known: %v): %d %s", known, resp.StatusCode, b)
		}
	}
}

// TestPassThroughRetries: a pass-through request whose backend cannot be
// reached, or answers 5xx before anything reached the client, goes on to
// another backend; an upload only while none of it was sent.
func TestPassThroughRetries(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close() // connection refused
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer failing.Close()
	echo := startEcho(t, "e")
	gw := startGateway(t, []config.Backend{backend("dead", deadURL), backend("failing", failing.URL), backend("e", echo.URL)},
		func(c *config.Config) {
			c.Balancer.Strategy = config.StrategyRoundRobin
			c.Health.Failures = 1000 // keep the broken backends in the rotation
		})
	retried := 0
	for i := range 6 {
		resp, body := do(t, http.MethodPost, gw.URL+"/detokenize", "application/json", strings.NewReader(`{"tokens":[`+strconv.Itoa(i)+`]}`))
		if resp.StatusCode != 200 || resp.Header.Get("X-Vigil-Backend") != "e" {
			t.Fatalf("/detokenize %d: %d from %q: %s", i, resp.StatusCode, resp.Header.Get("X-Vigil-Backend"), body)
		}
		if a := accessLine(t, gw, resp.Header.Get("X-Request-Id"))["attempts"].(float64); a > 1 {
			retried++
		}
	}
	if retried == 0 {
		t.Error("no request was retried")
	}

	// An upload is retried past the unreachable backend: nothing of it
	// was read.
	gw = startGateway(t, []config.Backend{backend("dead", deadURL), backend("e", echo.URL)},
		func(c *config.Config) {
			c.Balancer.Strategy = config.StrategyRoundRobin
			c.Health.Failures = 1000
		})
	retried = 0
	for i := range 4 {
		body, ct := multipartBody(1 << 20)
		resp, answer := do(t, http.MethodPost, gw.URL+"/v1/audio/transcriptions", ct, body)
		if resp.StatusCode != 200 || resp.Header.Get("X-Vigil-Backend") != "e" || !strings.Contains(string(answer), `"len":1048`) {
			t.Fatalf("upload %d: %d from %q: %s", i, resp.StatusCode, resp.Header.Get("X-Vigil-Backend"), answer)
		}
		if a := accessLine(t, gw, resp.Header.Get("X-Request-Id"))["attempts"].(float64); a > 1 {
			retried++
		}
	}
	if retried == 0 {
		t.Error("no upload was retried past the unreachable backend")
	}

	// An upload the backend read before it failed cannot be sent again:
	// its 5xx passes through.
	reader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer reader.Close()
	gw = startGateway(t, []config.Backend{backend("r", reader.URL), backend("e", echo.URL)},
		func(c *config.Config) {
			c.Balancer.Strategy = config.StrategyRoundRobin
			c.Health.Failures = 1000
		})
	var codes []int
	for range 4 {
		body, ct := multipartBody(1 << 20)
		resp, _ := do(t, http.MethodPost, gw.URL+"/v1/audio/transcriptions", ct, body)
		codes = append(codes, resp.StatusCode)
		if a := accessLine(t, gw, resp.Header.Get("X-Request-Id"))["attempts"].(float64); a != 1 {
			t.Errorf("an upload read by its backend was retried: %v attempts", a)
		}
	}
	if !slices.Contains(codes, http.StatusServiceUnavailable) || !slices.Contains(codes, 200) {
		t.Errorf("statuses %v, want the reading backend's 503 and the other's 200", codes)
	}
}

// TestPassThroughUploadTrickle: a streamed upload that stops arriving is
// cut at limits.read_timeout with a 408, the client's failure: its
// backend is not counted as failing.
func TestPassThroughUploadTrickle(t *testing.T) {
	// In a bubble: the 300 ms read timeout is bubble time, whatever the
	// machine's load.
	synctest.Test(t, func(t *testing.T) {
		n := &testutil.Network{}
		echo := &echoBackend{name: "e"}
		gw := startGatewayIn(t, n, []config.Backend{backend("e", n.Serve(t, echo.handler()))}, func(c *config.Config) {
			c.Limits.ReadTimeout = 300 * time.Millisecond
		})
		addr := serveLimited(t, gw)
		// A multipart form stalls while the gateway looks for its model; a
		// body of another type while it streams to the backend.
		for _, ct := range []string{"multipart/form-data; boundary=x", "application/octet-stream"} {
			c := dial(t, gw, addr)
			fmt.Fprint(c, "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: vigil\r\n"+
				"Content-Type: "+ct+"\r\nContent-Length: 1000\r\n\r\n--x\r\n")
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("%s: no answer to a stalled upload: %v", ct, err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), `"code":"request_timeout"`) {
				t.Fatalf("%s: stalled upload: %d %s %v, want 408", ct, resp.StatusCode, b, resp.Header)
			}
		}
		// A malformed chunked body is a 400.
		c := dial(t, gw, addr)
		fmt.Fprint(c, "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: vigil\r\n"+
			"Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\nzz\r\n")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to a malformed upload: %v", err)
		}
		if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"code":"invalid_request"`) {
			t.Errorf("malformed upload: %d %s, want 400", resp.StatusCode, b)
		}
		if n := gw.Pool().Backends()[0].ConsecutiveFailures(); n != 0 {
			t.Errorf("the backend was counted %d failures for a client's failed upload", n)
		}
	})
}

// TestPassThroughUploadByModel: a multipart upload is routed by the model
// field ahead of its file, which the backend gets whole.
func TestPassThroughUploadByModel(t *testing.T) {
	a, b := startEcho(t, "a"), startEcho(t, "b")
	gw := startGateway(t, []config.Backend{backend("a", a.URL, "whisper-a"), backend("b", b.URL, "whisper-b")}, nil)
	for i := range 6 {
		model, want := "whisper-a", "a"
		if i%2 == 1 {
			model, want = "whisper-b", "b"
		}
		body, ct := multipartFor(model, 200<<10)
		n, _ := io.Copy(io.Discard, func() io.Reader { r, _ := multipartFor(model, 200<<10); return r }())
		resp, answer := do(t, http.MethodPost, gw.URL+"/v1/audio/transcriptions", ct, body)
		if resp.StatusCode != 200 || resp.Header.Get("X-Vigil-Backend") != want || !strings.Contains(string(answer), fmt.Sprintf(`"len":%d`, n)) {
			t.Fatalf("upload for %s: %d from %q: %s", model, resp.StatusCode, resp.Header.Get("X-Vigil-Backend"), answer)
		}
	}
	body, ct := multipartFor("whisper-c", 1<<10)
	if resp, answer := do(t, http.MethodPost, gw.URL+"/v1/audio/transcriptions", ct, body); resp.StatusCode != 404 ||
		!strings.Contains(string(answer), "model_not_found") {
		t.Errorf("upload for an unknown model: %d %s", resp.StatusCode, answer)
	}
}
