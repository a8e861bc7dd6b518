package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/sim"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vigil test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf writes a certificate for 127.0.0.1 named cn, and its key, to dir.
func (ca *testCA) leaf(t *testing.T, dir, cn string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeAtomically(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	writeAtomically(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	return certFile, keyFile
}

// writeAtomically replaces path as a Secret update does (a rename), with
// a modification time of its own.
func writeAtomically(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// peerName is the common name of the certificate addr serves.
func peerName(t *testing.T, addr string, roots *x509.CertPool) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// steppedClock is a clock that moves only when the test steps it.
type steppedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *steppedClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *steppedClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestListenTLS: with listen_tls the gateway serves HTTPS, HTTP/2 included
// (a stream through it whole), and a certificate replaced on disk is
// served from the next handshake a second later; a broken replacement
// leaves the one in use. The reloader's clock is stepped, so that "a
// second later" is exact, whatever the machine's speed.
func TestListenTLS(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := ca.leaf(t, dir, "first")
	_, simURL := startSim(t, "m", func(k *sim.Knobs) { k.OutputTokens = 5 })
	gw := startGateway(t, []config.Backend{backend("a", simURL)}, func(c *config.Config) {
		c.ListenTLS = config.ListenTLS{CertFile: certFile, KeyFile: keyFile}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	clock := &steppedClock{t: time.Now()}
	// Before the first handshake reads them. The last check, taken on the
	// real clock when the gateway loaded the pair, goes onto the stepped
	// one too: otherwise the time spent since (a millisecond or more on a
	// loaded machine) counts toward the second that the steps below measure.
	gw.certs.now, gw.certs.checked = clock.now, clock.now()
	srv := gw.HTTPServer(nil)
	go gw.Serve(srv, gw.Listener(ln))
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	resp, err := client.Post("https://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || !strings.HasSuffix(strings.TrimSpace(string(b)), "data: [DONE]") {
		t.Fatalf("stream over HTTPS: %d %v %q", resp.StatusCode, err, tail(string(b), 80))
	}
	if resp.ProtoMajor != 2 {
		t.Errorf("served over %s, want HTTP/2", resp.Proto)
	}
	if got := peerName(t, addr, ca.pool); got != "first" {
		t.Fatalf("serving %q, want the certificate \"first\"", got)
	}

	ca.leaf(t, dir, "second")
	clock.step(999 * time.Millisecond)
	if got := peerName(t, addr, ca.pool); got != "first" {
		t.Fatalf("serving %q within a second of the last check, want \"first\" still", got)
	}
	clock.step(time.Millisecond) // a second since the last check: the files are stat'ed
	if got := peerName(t, addr, ca.pool); got != "second" {
		t.Fatalf("serving %q a second after the renewal, want \"second\"", got)
	}

	writeAtomically(t, certFile, []byte("not a certificate"))
	clock.step(time.Second)
	if got := peerName(t, addr, ca.pool); got != "second" {
		t.Errorf("after a broken replacement: serving %q, want \"second\" still", got)
	}
}

// TestListenTLSBadFiles: a certificate that does not load stops the start
// with the key named.
func TestListenTLSBadFiles(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	os.WriteFile(cert, []byte("junk"), 0o600)
	os.WriteFile(key, []byte("junk"), 0o600)
	cfg := config.Default()
	cfg.Backends = []config.Backend{backend("a", "http://127.0.0.1:9")}
	for _, tc := range []struct {
		tls  config.ListenTLS
		want string
	}{
		{config.ListenTLS{CertFile: cert, KeyFile: key}, "listen_tls: tls: failed to find any PEM data in certificate input"},
		{config.ListenTLS{CertFile: filepath.Join(dir, "missing"), KeyFile: key}, "listen_tls.cert_file: stat "},
	} {
		cfg.ListenTLS = tc.tls
		if _, err := New(Options{Config: cfg}); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("New with %+v: %v, want an error starting %q", tc.tls, err, tc.want)
		}
	}
}

// TestBackendTLSCA: an https:// backend whose certificate a private CA
// signed is refused (502) until backend_tls.ca_file names the CA.
func TestBackendTLSCA(t *testing.T) {
	s := sim.New(sim.Options{Model: "m", Seed: 1, Knobs: sim.DefaultKnobs()})
	be := httptest.NewTLSServer(s.Handler())
	t.Cleanup(be.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: be.Certificate().Raw}), 0o600)

	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, ca := range []string{"", caFile} {
		gw := startGateway(t, []config.Backend{backend("a", be.URL)}, func(c *config.Config) {
			c.BackendTLS.CAFile = ca
			c.Retries.Attempts = 1
		})
		code, _, b := post(t, gw.URL+"/v1/chat/completions", body)
		want := http.StatusOK
		if ca == "" {
			want = http.StatusBadGateway
		}
		if code != want {
			t.Errorf("backend_tls.ca_file %q: %d %s, want %d", ca, code, b, want)
		}
	}

	cfg := config.Default()
	cfg.BackendTLS.CAFile = filepath.Join(t.TempDir(), "none.pem")
	os.WriteFile(cfg.BackendTLS.CAFile, []byte("no certificate here"), 0o600)
	if _, err := New(Options{Config: cfg}); err == nil || !strings.HasPrefix(err.Error(), "backend_tls.ca_file: no PEM certificate") {
		t.Errorf("a CA file without certificates: %v", err)
	}
}
