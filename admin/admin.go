// Package admin is ebb's admin HTTP server: liveness and readiness for
// orchestrators, Prometheus metrics, the effective configuration, the
// endpoints of every cluster, and the drain triggers. It listens on loopback
// by default because it can reveal and change the proxy's state.
//
// Endpoints:
//
//	GET  /live            200 while the process runs
//	GET  /ready           200, or 503 with the drain phase and time left
//	GET  /metrics         Prometheus text (when Options.Metrics is set)
//	GET  /config          the effective configuration, secrets redacted
//	GET  /endpoints       each cluster's endpoints (when Options.Endpoints is set)
//	     /debug/pprof/    Go's profiles (when Options.Pprof is set)
//	GET  /drain/timeline  the drain's timeline as JSON (when Options.Timeline is set)
//	GET  /drain/report    the same as one HTML page with charts; it refreshes while draining
//	GET  /drain/progress  one JSON line per sample as the drain goes, then the outcome
//	POST /drain           start the drain; 202, and again 202 if already draining
//	POST /shutdown?now    skip to the forced close; 202 (400 without ?now)
//
// With Options.ProbeAddress, a second server on that address answers /live
// and /ready only, so that probes from outside the host (a kubelet) need
// no route to the rest.
//
// POST /drain is what `ebb drain` calls. The state-changing endpoints refuse
// cross-origin browser requests (403), so a web page cannot drain the proxy
// through a developer's browser. Every endpoint refuses (403) a request
// whose Host names neither an IP address, localhost, the admin address's
// host nor one of Options.Hosts: a page whose DNS name was rebound to the
// admin's address is not same-origin for the cross-origin check, but it
// still names its own host. With Options.Token set, every POST, /config,
// /endpoints and /debug/pprof/ need it as a Bearer token (401 without).
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/ebb-proxy/ebb/drain"
)

// Readiness is what /ready asks.
type Readiness interface {
	// Ready reports whether ebb should receive traffic and, when not,
	// why (for example the drain phase and the time left).
	Ready() (bool, string)
}

// Options configure the admin server.
type Options struct {
	Address string
	// Hosts are the names, besides IP addresses, localhost and the host of
	// Address, that requests may name in Host (admin.hosts).
	Hosts []string
	// ProbeAddress, if set, is a second address serving /live and /ready
	// only (admin.probe_address), for probes from outside the host.
	ProbeAddress string
	// Pprof serves Go's profiles under /debug/pprof/ (admin.pprof).
	Pprof bool
	// Token, when set, is required as "Authorization: Bearer TOKEN" by
	// every POST, /config, /endpoints and /debug/pprof/ (admin.token_file);
	// /live, /ready and /metrics stay open to probes and scrapers.
	Token string
	// Listen opens the socket for Address (nil: net.Listen), for a socket
	// handed over by the process ebb takes over from.
	Listen    func(address string) (net.Listener, error)
	Readiness Readiness
	Metrics   http.Handler
	// Config returns the effective configuration, secrets redacted.
	Config func() any
	// Endpoints returns the endpoints of every cluster (nil: no /endpoints).
	Endpoints func() any
	// Drain starts the drain (nil: no /drain). It returns at once.
	Drain func(cause string)
	// Timeline is the drain's (nil: no /drain/timeline, /drain/report,
	// /drain/progress).
	Timeline *drain.Timeline
	// Shutdown skips to the forced close (nil: no /shutdown).
	Shutdown func(cause string)
	// Reload reloads the configuration (nil: no /reload), returning what
	// it did (JSON) and whether the new configuration was applied.
	Reload func(trigger string) (result any, applied bool)
	Log    *slog.Logger
}

// Server is the admin server.
type Server struct {
	main  *served
	probe *served // nil without Options.ProbeAddress
}

// served is one HTTP server on its socket.
type served struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// serve starts serving h on ln in the background.
func serve(ln net.Listener, h http.Handler, log *slog.Logger, what string) *served {
	s := &served{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		// net.ErrClosed: StopAccepting closed the socket.
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			log.Error(what+" stopped", "err", err)
		}
	}()
	return s
}

// Start binds the admin address and serves in the background.
func Start(o Options) (*Server, error) {
	listen := o.Listen
	if listen == nil {
		listen = func(address string) (net.Listener, error) { return net.Listen("tcp", address) }
	}
	ln, err := listen(o.Address)
	if err != nil {
		return nil, fmt.Errorf("admin: listening on %s: %w", o.Address, err)
	}
	var probeLn net.Listener
	if o.ProbeAddress != "" {
		if probeLn, err = listen(o.ProbeAddress); err != nil {
			ln.Close()
			return nil, fmt.Errorf("admin: listening for probes on %s: %w", o.ProbeAddress, err)
		}
	}
	mux := http.NewServeMux()
	probes(mux, o.Readiness)
	if o.Metrics != nil {
		mux.Handle("GET /metrics", o.Metrics)
	}
	if o.Pprof {
		// Profiles, for finding where time goes under real load. Off
		// by default: they reveal the program's memory and cost CPU.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	}
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, o.Config()) })
	if o.Endpoints != nil {
		mux.HandleFunc("GET /endpoints", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, o.Endpoints()) })
	}
	if o.Drain != nil {
		mux.HandleFunc("POST /drain", func(w http.ResponseWriter, r *http.Request) {
			// Later triggers do not restart the drain (the controller
			// ignores them), so a repeated POST is accepted as well.
			o.Drain("admin /drain from " + r.RemoteAddr)
			text(w, http.StatusAccepted, "draining")
		})
	}
	if tl := o.Timeline; tl != nil {
		mux.HandleFunc("GET /drain/timeline", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Cache-Control", "no-store")
			writeJSON(w, tl.Report())
		})
		mux.HandleFunc("GET /drain/report", func(w http.ResponseWriter, _ *http.Request) {
			h := w.Header()
			h.Set("Content-Type", "text/html; charset=utf-8")
			h.Set("Cache-Control", "no-store")
			// The page needs nothing but itself and its inline styles.
			h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
			_ = tl.Report().WriteHTML(w)
		})
		mux.HandleFunc("GET /drain/progress", func(w http.ResponseWriter, r *http.Request) { progress(w, r, tl) })
	}
	if o.Reload != nil {
		mux.HandleFunc("POST /reload", func(w http.ResponseWriter, r *http.Request) {
			res, applied := o.Reload("admin /reload from " + r.RemoteAddr)
			w.Header().Set("Content-Type", "application/json")
			if !applied {
				// The request was fine; the configuration file was not.
				w.WriteHeader(http.StatusUnprocessableEntity)
			}
			_ = json.NewEncoder(w).Encode(res)
		})
	}
	if o.Shutdown != nil {
		mux.HandleFunc("POST /shutdown", func(w http.ResponseWriter, r *http.Request) {
			// ?now is required so that a graceful stop cannot be asked
			// for by mistake with a forced one.
			if !r.URL.Query().Has("now") {
				text(w, http.StatusBadRequest, "POST /shutdown closes every connection at once and requires ?now; for a graceful stop, POST /drain")
				return
			}
			o.Shutdown("admin /shutdown?now from " + r.RemoteAddr)
			text(w, http.StatusAccepted, "closing now")
		})
	}
	// A browser on the admin host must not be usable to drain the proxy
	// from a web page: cross-origin POSTs (Sec-Fetch-Site, Origin) are
	// refused; curl and `ebb drain` send neither header.
	handler := checkHost(o.Address, o.Hosts, requireToken(o.Token, http.NewCrossOriginProtection().Handler(mux)))
	s := &Server{main: serve(ln, handler, o.Log, "admin server")}
	if probeLn != nil {
		pm := http.NewServeMux()
		probes(pm, o.Readiness)
		s.probe = serve(probeLn, pm, o.Log, "probe server")
	}
	return s, nil
}

// ProgressLine is one line of /drain/progress: a sample, or, last, the
// outcome.
type ProgressLine struct {
	Sample  *drain.Sample  `json:"sample,omitempty"`
	Outcome *drain.Outcome `json:"outcome,omitempty"`
}

// progress streams the drain as it goes: one line per sample recorded
// (waiting for the drain to begin, if it has not), then a line with the
// outcome, then the end of the response.
func progress(w http.ResponseWriter, r *http.Request, tl *drain.Timeline) {
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	var seen uint64
	for {
		changed := tl.Changed()
		ss, next, out := tl.Since(seen)
		for i := range ss {
			if enc.Encode(ProgressLine{Sample: &ss[i]}) != nil {
				return
			}
		}
		seen = next
		if out != nil {
			_ = enc.Encode(ProgressLine{Outcome: out})
			return
		}
		if rc.Flush() != nil {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
}

// probes registers /live and /ready, the endpoints probes call, on mux.
func probes(mux *http.ServeMux, r Readiness) {
	mux.HandleFunc("GET /live", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "live")
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ok, why := r.Ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, why)
	})
}

// checkHost refuses requests whose Host is not one of this server's names
// (see the package comment), against DNS rebinding.
func checkHost(address string, hosts []string, next http.Handler) http.Handler {
	allowed := map[string]bool{"localhost": true}
	if h, _, err := net.SplitHostPort(address); err == nil && h != "" {
		allowed[strings.ToLower(h)] = true
	}
	for _, h := range hosts {
		allowed[strings.ToLower(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if host != "" && net.ParseIP(host) == nil && !allowed[strings.ToLower(strings.TrimSuffix(host, "."))] {
			text(w, http.StatusForbidden, fmt.Sprintf("Host %q is not a name of this admin server: use its address, or list the name in admin.hosts", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requireToken refuses (401) requests to the endpoints Options.Token
// guards that do not carry it.
func requireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		guarded := r.Method == http.MethodPost || r.URL.Path == "/config" || r.URL.Path == "/endpoints" ||
			strings.HasPrefix(r.URL.Path, "/debug/pprof/")
		if guarded && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ebb admin"`)
			text(w, http.StatusUnauthorized, "this endpoint needs the admin token (admin.token_file): Authorization: Bearer TOKEN")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func text(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprintln(w, msg)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// Addr returns the bound address.
func (s *Server) Addr() net.Addr { return s.main.ln.Addr() }

// ProbeAddr returns the probe server's bound address, nil without one.
func (s *Server) ProbeAddr() net.Addr {
	if s.probe == nil {
		return nil
	}
	return s.probe.ln.Addr()
}

// Listener returns the listening socket, for handing over to a successor
// process.
func (s *Server) Listener() net.Listener { return s.main.ln }

// ProbeListener returns the probe server's listening socket, nil without
// one.
func (s *Server) ProbeListener() net.Listener {
	if s.probe == nil {
		return nil
	}
	return s.probe.ln
}

// StopAccepting closes the listening sockets: requests on connections
// already open are still answered, until Shutdown or Close. (After a
// takeover, the successor accepts on the same sockets.)
func (s *Server) StopAccepting() {
	for _, x := range s.both() {
		x.ln.Close()
	}
}

// Shutdown stops the admin server gracefully.
func (s *Server) Shutdown(ctx context.Context) error {
	var errs []error
	for _, x := range s.both() {
		errs = append(errs, x.srv.Shutdown(ctx))
		<-x.done
	}
	return errors.Join(errs...)
}

// Close stops the admin server now.
func (s *Server) Close() error {
	var errs []error
	for _, x := range s.both() {
		errs = append(errs, x.srv.Close())
		<-x.done
	}
	return errors.Join(errs...)
}

// both returns the servers running.
func (s *Server) both() []*served {
	if s.probe == nil {
		return []*served{s.main}
	}
	return []*served{s.main, s.probe}
}
