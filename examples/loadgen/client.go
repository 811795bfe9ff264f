package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Timeout bounds each request of a client, and its wait for the
// response's header.
const Timeout = 15 * time.Second

// Client sends the requests of a load's workers. Do sends one request and
// checks the answer (Request): any failure, a status other than 200, a
// body other than the expected one or a missing echo of the request's id
// is an error. It returns the answer's X-Replica. Do is called
// concurrently, once at a time per worker w; ending ctx abandons the
// request.
type Client interface {
	Do(ctx context.Context, w int, r Request) (replica string, err error)
	// Close closes the client's idle connections.
	Close()
}

// Kind names a client and builds it for workers workers sending to addr
// (host:port).
type Kind struct {
	Name string
	New  func(addr string, workers int) Client
}

// The clients of the e2e drain scenarios.
var (
	// GoHTTP1 is Go's HTTP/1.1 client: one keep-alive pool shared by the
	// workers, large enough to keep a connection per worker, whose idle
	// connections last GoHTTP1IdleTimeout.
	GoHTTP1 = Go("go-http1", GoConfig{IdleTimeout: GoHTTP1IdleTimeout})
	// StrictHTTP1 is a strict HTTP/1.1 client (Strict).
	StrictHTTP1 = Kind{Name: "strict-http1", New: func(addr string, workers int) Client { return NewStrict(addr, workers) }}
	// GoHTTP2 is Go's HTTP/2 client (h2c with prior knowledge), one
	// transport per worker: a transport multiplexes everything on one
	// connection, and one connection would reach one replica only.
	GoHTTP2 = Go("go-http2", GoConfig{HTTP2: true, PerWorker: true, IdlePerHost: 2})
	// GoHTTP1PerWorker is Go's HTTP/1.1 client with a transport per
	// worker, each keeping its one connection: as many keep-alive
	// connections as workers, whatever the timing.
	GoHTTP1PerWorker = Go("go-http1-per-worker", GoConfig{PerWorker: true})
)

// Kinds are the clients of the VIP and rolling scenarios.
var Kinds = []Kind{GoHTTP1, StrictHTTP1, GoHTTP2}

// GoHTTP1IdleTimeout is how long the shared pool of GoHTTP1 keeps a
// connection nobody uses: below the drain.http1.idle_close of the
// scenarios that drain under it (200ms), as a client's keep-alive timeout
// should be below its server's. The pool is last in, first out, and Go
// dials a connection for a request that then takes one freed meanwhile,
// keeping the new one: such spares sit idle in the pool until a burst
// reaches them, at any moment. A drain closes them with a FIN idle_close
// after their moment, and one taken at the instant that FIN is on its way
// (through the VIP's copying, on a loaded machine: milliseconds) carries
// its request into a closed connection; Go does not resend a POST. No
// server can close an idle HTTP/1 connection without that race (DRAIN.md,
// signal close); a client whose idle timeout is the shorter never meets it.
const GoHTTP1IdleTimeout = 100 * time.Millisecond

// GoConfig is how a kind of Go's client pools its connections.
type GoConfig struct {
	HTTP2 bool // HTTP/2 in cleartext (prior knowledge); else HTTP/1.1
	// PerWorker: a transport per worker; else one the workers share.
	PerWorker bool
	// IdlePerHost is how many idle connections a transport keeps; 0: one
	// per worker it serves.
	IdlePerHost int
	IdleTimeout time.Duration // how long an idle connection is kept; 0: no limit
	NoKeepAlive bool          // a new connection for every request
}

// Go returns a kind, named name, of Go's client pooling as c says, with
// its own retries as they are.
func Go(name string, c GoConfig) Kind {
	return Kind{Name: name, New: func(addr string, workers int) Client { return newGoClient(addr, workers, c) }}
}

// goClient is Go's client. Each worker uses clients[w%len(clients)].
type goClient struct {
	base    string
	major   int // the protocol version every response must have
	clients []*http.Client
	trs     []*http.Transport
}

func newGoClient(addr string, workers int, c GoConfig) *goClient {
	var p http.Protocols
	g := &goClient{base: "http://" + addr, major: 1}
	if c.HTTP2 {
		p.SetUnencryptedHTTP2(true)
		g.major = 2
	} else {
		p.SetHTTP1(true)
	}
	transports, idle := 1, workers
	if c.PerWorker {
		transports, idle = workers, 1
	}
	if c.IdlePerHost > 0 {
		idle = c.IdlePerHost
	}
	for range transports {
		tr := &http.Transport{
			Protocols:             &p,
			DisableCompression:    true,
			DisableKeepAlives:     c.NoKeepAlive,
			MaxIdleConnsPerHost:   idle,
			IdleConnTimeout:       c.IdleTimeout,
			ResponseHeaderTimeout: Timeout,
		}
		g.trs = append(g.trs, tr)
		g.clients = append(g.clients, &http.Client{Transport: tr, Timeout: Timeout})
	}
	return g
}

func (g *goClient) Do(ctx context.Context, w int, r Request) (string, error) {
	var body io.Reader
	if r.Method == http.MethodPost {
		body = strings.NewReader(r.Body) // GetBody set: Go may replay it
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, g.base+r.Path, body)
	if err != nil {
		return "", err
	}
	if body != nil {
		req.Header.Set("Content-Type", r.ContentType)
	}
	if r.ID != "" {
		req.Header.Set("X-Request-Id", r.ID)
	}
	req.Close = r.Last // HTTP/2 too: the connection is not reused
	resp, err := g.clients[w%len(g.clients)].Do(req)
	if err != nil {
		return "", err
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", fmt.Errorf("%s %s: status %d, reading the body: %w", r.Method, r.Path, resp.StatusCode, err)
	}
	return resp.Header.Get("X-Replica"), check(r, g.major, resp, string(got))
}

func (g *goClient) Close() {
	for _, tr := range g.trs {
		tr.CloseIdleConnections()
	}
}
