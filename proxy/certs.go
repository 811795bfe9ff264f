package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

const (
	// certPoll is how often the certificate files are re-read even without
	// a change notification: some file systems (network mounts) send none.
	certPoll = 10 * time.Second
	// certDebounce lets a burst of events settle (a secret update renames
	// and removes several entries) before the files are read.
	certDebounce = 100 * time.Millisecond
)

// certStore holds a listener's TLS certificate and replaces it when the
// files on disk change (certificate rotation, Kubernetes secret updates),
// without touching the connections already open: they keep the certificate
// they were established with, and new handshakes get the new one.
//
// The directories of the files are watched rather than the files, so that
// atomic renames and the Kubernetes secret layout (tls.crt -> ..data/tls.crt,
// with ..data a symlink swapped to a new directory) are seen. A pair that
// does not load keeps the previous one serving, and the reason is logged.
//
// certFile, keyFile, log and onReload are read-only once run has started.
// cert is read by handshakes and written by the run goroutine. sum belongs
// to the run goroutine (newCertStore sets it before).
type certStore struct {
	certFile, keyFile string
	log               *slog.Logger

	// onReload, if set, is called by run after each attempt to load changed
	// files, with nil or the reason the pair was not taken; for tests.
	onReload func(error)

	cert atomic.Pointer[tls.Certificate]
	sum  pairSum // content last tried, loaded or not
}

// pairSum identifies the content of a certificate and key pair, so that
// only a change is loaded (and a bad pair is logged once, not every poll).
type pairSum struct{ cert, key [sha256.Size]byte }

// newCertStore loads the PEM certificate (chain) and key once.
func newCertStore(certFile, keyFile string, log *slog.Logger) (*certStore, error) {
	s := &certStore{certFile: certFile, keyFile: keyFile, log: log}
	certPEM, keyPEM, err := s.read()
	if err == nil {
		var cert *tls.Certificate
		if cert, err = parsePair(certPEM, keyPEM); err == nil {
			s.cert.Store(cert)
			s.sum = pairSum{sha256.Sum256(certPEM), sha256.Sum256(keyPEM)}
			return s, nil
		}
	}
	return nil, fmt.Errorf("proxy: loading TLS certificate %s and key %s: %w", certFile, keyFile, err)
}

// getCertificate is tls.Config.GetCertificate: it returns the current pair.
func (s *certStore) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cert.Load(), nil
}

// run watches both files until ctx ends, reloading the pair when their
// content changes. It is called once; it returns when its watcher is closed.
func (s *certStore) run(ctx context.Context) {
	poll := time.NewTicker(certPoll)
	defer poll.Stop()
	settle := time.NewTimer(certDebounce)
	settle.Stop()
	defer settle.Stop()

	var events <-chan fsnotify.Event
	var errs <-chan error
	if w, err := s.watch(); err != nil {
		s.log.Warn("TLS certificate files not watched; polling them", "cert", s.certFile, "key", s.keyFile, "every", certPoll, "err", err)
	} else {
		defer w.Close() // waits for the watcher's goroutine
		events, errs = w.Events, w.Errors
	}
	// The files may have changed between newCertStore and the watch.
	s.reload()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			// Any change in the directories may concern the files (renames,
			// symlink swaps); reload compares contents.
			settle.Reset(certDebounce)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			s.log.Warn("watching the TLS certificate files", "cert", s.certFile, "key", s.keyFile, "err", err)
		case <-settle.C:
			s.reload()
		case <-poll.C:
			s.reload()
		}
	}
}

// watch watches the directories holding the two files.
func (s *certStore) watch() (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	dirs := []string{filepath.Dir(s.certFile)}
	if d := filepath.Dir(s.keyFile); d != dirs[0] {
		dirs = append(dirs, d)
	}
	for _, dir := range dirs {
		if err := w.Add(dir); err != nil {
			w.Close()
			return nil, fmt.Errorf("watching %s: %w", dir, err)
		}
	}
	return w, nil
}

// reload reads both files and, if their content changed since the last
// attempt, swaps in the new pair. A pair that does not load is not retried
// until the content changes again: the certificate and key replaced one
// after the other are a mismatch until the second one lands.
func (s *certStore) reload() {
	certPEM, keyPEM, err := s.read()
	if err == nil {
		sum := pairSum{sha256.Sum256(certPEM), sha256.Sum256(keyPEM)}
		if sum == s.sum {
			return
		}
		s.sum = sum
		var cert *tls.Certificate
		if cert, err = parsePair(certPEM, keyPEM); err == nil {
			s.cert.Store(cert)
			s.log.Info("TLS certificate reloaded", "cert", s.certFile, "key", s.keyFile,
				"subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
		}
	}
	if err != nil {
		s.log.Warn("TLS certificate not reloaded; serving the previous one", "cert", s.certFile, "key", s.keyFile, "err", err)
	}
	if s.onReload != nil {
		s.onReload(err)
	}
}

// read returns the content of both files.
func (s *certStore) read() (certPEM, keyPEM []byte, err error) {
	if certPEM, err = os.ReadFile(s.certFile); err != nil {
		return nil, nil, err
	}
	if keyPEM, err = os.ReadFile(s.keyFile); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// parsePair parses a PEM certificate chain and its key, with Leaf set.
func parsePair(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if cert.Leaf == nil { // GODEBUG=x509keypairleaf=0
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &cert, nil
}

// serverTLSConfig returns the configuration of a TLS listener serving the
// store's certificate: Go's default cipher suites and curves, TLS 1.2 at
// least, and ALPN for HTTP/2 and HTTP/1.1.
func serverTLSConfig(s *certStore) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: s.getCertificate,
	}
}
