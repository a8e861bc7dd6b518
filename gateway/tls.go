package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certReloader serves listen_tls's certificate, reloaded when its files
// change: at most once a second, at a TLS handshake, both files are
// stat'ed, and read again when either changed (a Kubernetes Secret or
// cert-manager renewal swaps them in place). A pair that does not load
// leaves the one in use, with an error logged, until a good pair comes.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	now               func() time.Time // time.Now; tests step it past the once-a-second check

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string    // the files' size and modification times when cert was loaded (or last failed)
	checked time.Time // last stat
}

// newCertReloader loads the pair once: an error here stops the start.
func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log, now: time.Now}
	stamp, err := r.stampNow()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("listen_tls: %w", err)
	}
	r.cert, r.stamp, r.checked = &cert, stamp, r.now()
	return r, nil
}

func (r *certReloader) stampNow() (string, error) {
	c, err := os.Stat(r.certFile)
	if err != nil {
		return "", fmt.Errorf("listen_tls.cert_file: %w", err)
	}
	k, err := os.Stat(r.keyFile)
	if err != nil {
		return "", fmt.Errorf("listen_tls.key_file: %w", err)
	}
	return fmt.Sprint(c.Size(), c.ModTime().UnixNano(), k.Size(), k.ModTime().UnixNano()), nil
}

// getCertificate is tls.Config.GetCertificate.
func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= time.Second {
		r.checked = now
		if stamp, err := r.stampNow(); err != nil {
			r.log.Error("TLS certificate not reloaded: keeping the one in use", "err", err)
		} else if stamp != r.stamp {
			r.stamp = stamp // a bad pair is retried when the files change again
			if cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile); err != nil {
				r.log.Error("TLS certificate not reloaded: keeping the one in use", "err", err)
			} else {
				r.cert = &cert
				r.log.Info("TLS certificate reloaded", "cert_file", r.certFile)
			}
		}
	}
	return r.cert, nil
}

// tlsConfig is the listener's TLS configuration: TLS 1.2 or newer, HTTP/2
// and HTTP/1.1 offered (net/http's ServeTLS adds "h2").
func (r *certReloader) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.getCertificate}
}

// rootCAs returns the system's roots plus the PEM certificates of
// backend_tls.ca_file, for https:// backends with a private CA.
func rootCAs(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("backend_tls.ca_file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("backend_tls.ca_file: no PEM certificate in " + caFile)
	}
	return pool, nil
}
