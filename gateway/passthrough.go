package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/gin-gonic/gin"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/apierror"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// Pass-through. Every path that is not one of the gateway's routes goes to
// a backend as it is (method, path, query, headers, body), and its answer
// comes back byte for byte, a backend's own 404 included: a gateway in
// front of vLLM or TGI serves whatever they serve (tokenize, pooling,
// score, rerank, audio, ...) without a release of its own for each. Such a
// request is routed by the model of its JSON body (or of the fields ahead
// of the file of a multipart upload) when it has one, is
// traced, retried before its first byte, counted in health and the access
// log, but not analysed. What stays the gateway's own:
//   - its paths (ownPath): /healthz, /readyz, /metrics, /admin/*,
//     /dashboard*, /debug/pprof/*; an unknown one of them is a JSON 404;
//   - the paths that change a backend's state (config.AdminPaths), refused
//     with a 403 unless passthrough.allow_admin_paths lists them.

// passRoute is how the pass-through serves a path it knows: the bounded
// route label of its metrics, spans and access log, and the kinds of
// backend that serve it.
type passRoute struct {
	path  string
	kinds []string
}

// passRoutes are the paths of vLLM and TGI servers the pass-through knows
// by name, so that their route label is their path and their requests go
// to the kind of backend that serves them. Any other path is labelled
// "/v1/*" (to OpenAI-compatible backends) or "/*" (to any backend).
var passRoutes = []passRoute{
	{"/tokenize", kindsOpenAI},
	{"/detokenize", kindsOpenAI},
	{"/pooling", kindsOpenAI},
	{"/classify", kindsOpenAI},
	{"/score", kindsOpenAI},
	{"/v1/score", kindsOpenAI},
	{"/rerank", kindsOpenAI},
	{"/v1/rerank", kindsOpenAI},
	{"/v2/rerank", kindsOpenAI},
	{"/v1/audio/transcriptions", kindsOpenAI},
	{"/v1/audio/translations", kindsOpenAI},
	{"/inference/v1/generate", kindsOpenAI},
	{"/version", kindsOpenAI},
	{"/chat_tokenize", kindsTGI},
}

var (
	kindsOpenAI = []string{upstream.KindOpenAI}
	kindsTGI    = []string{upstream.KindTGI}
)

// Route labels of the paths passRoutes does not name.
const (
	routeV1Other = "/v1/*"
	routeOther   = "/*"
)

// passThrough returns the handler of every path no route matched.
func (s *Server) passThrough() gin.HandlerFunc {
	known := make(map[string]gin.HandlerFunc, len(passRoutes))
	for _, pr := range passRoutes {
		known[pr.path] = s.proxyRoute("", pr.path, exchange.OpOther, pr.kinds...)
	}
	v1 := s.proxyRoute("", routeV1Other, exchange.OpOther, kindsOpenAI...)
	other := s.proxyRoute("", routeOther, exchange.OpOther)
	return func(c *gin.Context) {
		p := cleanPath(c.Request.URL.Path)
		if h, ok := known[p]; ok {
			h(c)
			return
		}
		switch {
		case ownPath(p):
			apierror.Write(c.Writer, apierror.New(http.StatusNotFound, "invalid_request_error", "not_found",
				"no route for "+c.Request.Method+" "+c.Request.URL.Path, exchange.ClassBadRequest))
		case strings.HasPrefix(p, "/v1/"):
			v1(c)
		default:
			other(c)
		}
	}
}

// cleanPath is p as a backend's router would match it: without dot
// segments, doubled slashes or a trailing slash, so that "/sleep/" or
// "//x/../sleep" are checked as "/sleep".
func cleanPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return path.Clean(p) // p itself, without a copy, when it is clean
}

// ownPath reports whether the clean path p is under one of the gateway's
// own paths, never passed through.
func ownPath(p string) bool {
	for _, own := range [...]string{"/healthz", "/readyz", "/metrics", "/admin", "/dashboard", "/debug/pprof"} {
		if p == own || strings.HasPrefix(p, own+"/") {
			return true
		}
	}
	return false
}

// refuseAdmin is the 403 of a state-changing path not allowed by
// passthrough.allow_admin_paths, nil for any other path.
func (s *Server) refuseAdmin(r *http.Request) *apierror.Error {
	p := cleanPath(r.URL.Path)
	if !slices.Contains(config.AdminPaths, p) || slices.Contains(s.cfg.Passthrough.AllowAdminPaths, p) {
		return nil
	}
	return apierror.New(http.StatusForbidden, "invalid_request_error", "path_not_allowed",
		fmt.Sprintf("%s changes a backend's state and is refused by the gateway; list it in passthrough.allow_admin_paths to allow it", p),
		exchange.ClassBadRequest)
}

// bufferedBody reports whether a passed-through body is read whole before
// it goes on: a JSON body (or one of no declared type, which a backend may
// still read as JSON) is, to route it by its model; any other (multipart
// uploads, octet-stream) streams to the backend, read ahead only as far as
// a multipart upload's model (multipartModel).
func bufferedBody(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return true // read as before; a backend will judge it
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// multipartPeek bounds what is read ahead of a multipart upload to find
// its model: OpenAI's audio clients send the model field before the file,
// but a model after a large file is not worth holding the file for.
const multipartPeek = 64 << 10

// multipartModel returns the value of the "model" field of a
// multipart/form-data body of content type ct, looking only at the fields
// before the first file within what br holds after peeking
// multipartPeek bytes; br keeps every byte for the backend. The error is
// the client's body failing before that much of it came (too large, too
// slow, broken off).
func multipartModel(ct string, br *bufio.Reader) (string, error) {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return "", nil
	}
	head, err := br.Peek(multipartPeek)
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return "", err
	}
	mr := multipart.NewReader(bytes.NewReader(head), params["boundary"])
	for {
		part, err := mr.NextPart()
		if err != nil || part.FileName() != "" {
			return "", nil
		}
		if part.FormName() == "model" {
			v, err := io.ReadAll(io.LimitReader(part, 257))
			if err != nil || len(v) > 256 {
				return "", nil
			}
			return string(v), nil
		}
	}
}

// errBodyTaken is what an attempt reads from a streamed body that was
// handed on to a later attempt.
var errBodyTaken = errors.New("request body handed on to another attempt")

// streamBody is a request body that streams to the backend rather than
// being read first. It cannot be replayed: an attempt may be retried only
// while no byte of it was read (a connect error, a backend that answered
// without reading), so one attempt at a time owns it.
type streamBody struct {
	r io.Reader // http.MaxBytesReader over the client's body

	mu      sync.Mutex
	gen     int   // attempts given a reader
	owner   int   // the attempt that may read it (1, 2, ...); 0: none
	touched bool  // a read started
	err     error // the first error reading the client's body, io.EOF aside
}

// reader returns the body of the current attempt.
func (b *streamBody) reader() io.ReadCloser {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gen++
	b.owner = b.gen
	return &streamReader{b: b, attempt: b.gen}
}

// handOn reports whether the body may go to another attempt: nothing of
// it was read. Once it said yes, the failed attempt reads nothing more.
func (b *streamBody) handOn() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.touched {
		return false
	}
	b.owner = 0 // the failed attempt's reader reads no more
	return true
}

// readErr is the error the client's body gave, nil if none.
func (b *streamBody) readErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// streamReader is one attempt's view of a streamBody. The transport reads
// it on a goroutine of its own, maybe after the attempt ended; Close is
// left to net/http, which closes the client's body itself.
type streamReader struct {
	b       *streamBody
	attempt int
}

func (sr *streamReader) Read(p []byte) (int, error) {
	b := sr.b
	b.mu.Lock()
	if b.owner != sr.attempt {
		b.mu.Unlock()
		return 0, errBodyTaken
	}
	b.touched = true
	b.mu.Unlock()
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

func (sr *streamReader) Close() error { return nil }

// streamError is the answer to a streamed body the client failed to send:
// too large, too slow or broken. It is the client's failure, not the
// backend's.
func streamError(w http.ResponseWriter, err error, limit int64) *apierror.Error {
	w.Header().Set("Connection", "close")
	return uploadError(err, limit)
}

// uploadError is the gateway's answer to a client whose upload failed
// (err): its connection must close, since its body was left unread.
func uploadError(err error, limit int64) *apierror.Error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return apierror.New(http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
			fmt.Sprintf("request body exceeds the limit of %d bytes (passthrough.max_upload_bytes)", limit), exchange.ClassBadRequest)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return apierror.New(http.StatusRequestTimeout, "invalid_request_error", "request_timeout",
			"the request body did not arrive within limits.read_timeout", exchange.ClassBadRequest)
	}
	return apierror.BadRequest("could not read request body: " + err.Error())
}

// clientGone reports whether err, from reading a client's body, says
// the client went away (rather than hit a limit or sent a malformed body).
func clientGone(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// maxPathBytes bounds the path the access log records: a client chooses
// it, and a line should stay a line.
const maxPathBytes = 1024

// logPath is p as the access log records it.
func logPath(p string) string {
	if len(p) > maxPathBytes {
		return p[:maxPathBytes]
	}
	return p
}
