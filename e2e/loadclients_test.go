package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// loadRequest is one request of a load (load_test.go), with the answer
// expected.
type loadRequest struct {
	method      string
	path        string
	body        string // POST only
	contentType string // of the body
	// id, when set, is sent as X-Request-Id, and the answer must echo it.
	id   string
	want string // the response body expected
	// last: the client sends Connection: close and leaves after this
	// request.
	last bool
}

// mixedRequest is the request mix of the VIP and rolling scenarios, as
// mixedOrigin answers it: request i of worker w, GET and POST alternately.
func mixedRequest(w, i int, last bool) loadRequest {
	path := fmt.Sprintf("/vip/w%d/%d", w, i)
	if i%2 == 0 {
		return loadRequest{method: http.MethodGet, path: path, want: "get " + path + "\n", last: last}
	}
	body := fmt.Sprintf("payload of worker %d, request %d", w, i)
	return loadRequest{method: http.MethodPost, path: path, body: body, contentType: "text/plain",
		want: "post " + path + " " + body + "\n", last: last}
}

// mixedOrigin answers every GET with "get PATH\n" and every POST with
// "post PATH BODY\n". With closeEach, every response says Connection: close
// and the origin closes the connection after it.
func mixedOrigin(closeEach bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if closeEach {
			w.Header().Set("Connection", "close")
		}
		switch r.Method {
		case http.MethodGet:
			io.WriteString(w, "get "+r.URL.Path+"\n")
		case http.MethodPost:
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, "origin: reading the body: "+err.Error(), http.StatusBadRequest)
				return
			}
			io.WriteString(w, "post "+r.URL.Path+" "+string(body)+"\n")
		default:
			http.Error(w, "origin: unexpected method", http.StatusMethodNotAllowed)
		}
	})
}

// loadClient sends the requests of a load's workers. do sends one request
// and checks the answer: any failure, a status other than 200, a body
// other than the expected one or a missing echo of the request's id is an
// error. It returns the answer's X-Replica. do is called concurrently,
// once at a time per worker.
type loadClient interface {
	do(w int, r loadRequest) (replica string, err error)
	// close closes the client's idle connections.
	close()
}

// clientKind names a client of the load and builds it for workers workers
// sending to addr.
type clientKind struct {
	name string
	new  func(addr string, workers int) loadClient
}

// clientKinds are the clients of the VIP and rolling scenarios.
var clientKinds = []clientKind{
	{name: "go-http1", new: newGoHTTP1Client},
	{name: "strict-http1", new: newStrictClient},
	{name: "go-http2", new: newGoHTTP2Client},
}

// goHTTP1PerWorker is Go's HTTP/1.1 client with a transport per worker,
// each keeping its one connection: as many keep-alive connections as
// workers, whatever the timing.
var goHTTP1PerWorker = clientKind{name: "go-http1-per-worker", new: func(addr string, workers int) loadClient {
	var p http.Protocols
	p.SetHTTP1(true)
	return newGoClient(addr, 1, workers, 1, &p, 0)
}}

// goClient is Go's client, with its own pooling and retries as they are.
// Each worker uses clients[w%len(clients)].
type goClient struct {
	base    string
	major   int // the protocol version every response must have
	clients []*http.Client
	trs     []*http.Transport
}

func newGoClient(addr string, major, transports, idlePerHost int, p *http.Protocols, idleTimeout time.Duration) *goClient {
	g := &goClient{base: "http://" + addr, major: major}
	for range transports {
		tr := &http.Transport{
			Protocols:             p,
			DisableCompression:    true,
			MaxIdleConnsPerHost:   idlePerHost,
			IdleConnTimeout:       idleTimeout,
			ResponseHeaderTimeout: waitTimeout,
		}
		g.trs = append(g.trs, tr)
		g.clients = append(g.clients, &http.Client{Transport: tr, Timeout: waitTimeout})
	}
	return g
}

// goHTTP1IdleTimeout is how long the shared pool of Go's HTTP/1.1 client
// keeps a connection nobody uses: below the drain.http1.idle_close of the
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
const goHTTP1IdleTimeout = 100 * time.Millisecond

// newGoHTTP1Client is Go's HTTP/1.1 client: one keep-alive pool shared by
// the workers, large enough to keep a connection per worker.
func newGoHTTP1Client(addr string, workers int) loadClient {
	var p http.Protocols
	p.SetHTTP1(true)
	return newGoClient(addr, 1, 1, workers, &p, goHTTP1IdleTimeout)
}

// newGoHTTP2Client is Go's HTTP/2 client (h2c with prior knowledge), one
// transport per worker: a transport multiplexes everything on one
// connection, and one connection would reach one replica only.
func newGoHTTP2Client(addr string, workers int) loadClient {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return newGoClient(addr, 2, workers, 2, &p, 0)
}

func (g *goClient) do(w int, r loadRequest) (string, error) {
	var body io.Reader
	if r.method == http.MethodPost {
		body = strings.NewReader(r.body) // GetBody set: Go may replay it
	}
	req, err := http.NewRequest(r.method, g.base+r.path, body)
	if err != nil {
		return "", err
	}
	if body != nil {
		req.Header.Set("Content-Type", r.contentType)
	}
	if r.id != "" {
		req.Header.Set("X-Request-Id", r.id)
	}
	req.Close = r.last // HTTP/2 too: the connection is not reused
	resp, err := g.clients[w%len(g.clients)].Do(req)
	if err != nil {
		return "", err
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", fmt.Errorf("%s %s: status %d, reading the body: %w", r.method, r.path, resp.StatusCode, err)
	}
	return resp.Header.Get("X-Replica"), checkAnswer(r, g.major, resp, string(got))
}

func (g *goClient) close() {
	for _, tr := range g.trs {
		tr.CloseIdleConnections()
	}
}

// checkAnswer checks resp, whose body was got, against r.
func checkAnswer(r loadRequest, wantMajor int, resp *http.Response, got string) error {
	if resp.ProtoMajor != wantMajor {
		return fmt.Errorf("%s %s: answered over HTTP/%d, want HTTP/%d", r.method, r.path, resp.ProtoMajor, wantMajor)
	}
	if resp.StatusCode != http.StatusOK || got != r.want {
		replica := ""
		if x := resp.Header.Get("X-Replica"); x != "" {
			replica = fmt.Sprintf(" (X-Replica %q)", x)
		}
		return fmt.Errorf("%s %s: %d%s %s, want 200 %s", r.method, r.path, resp.StatusCode, replica, quoteBody(got), quoteBody(r.want))
	}
	if g := resp.Header.Get("X-Request-Id"); r.id != "" && g != r.id {
		return fmt.Errorf("%s %s: X-Request-Id %q, want %q", r.method, r.path, g, r.id)
	}
	return nil
}

// quoteBody quotes a body for a message: whole if short, else its length
// and its start.
func quoteBody(b string) string {
	if len(b) <= 100 {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%d bytes %q...", len(b), b[:40])
}

// strictClient is a strict HTTP/1.1 client: a small keep-alive pool of its
// own over net.Conn and bufio, shared by the workers. It sends every
// request exactly once and never retries. Before reusing a pooled
// connection it checks, without blocking, whether the server has closed it
// (a read with a deadline in the past: a timeout means alive, EOF means
// closed) and drops it if so, as client pools do. It honours
// Connection: close.
//
// addr is read-only; idle, closed and the counters are guarded by mu.
type strictClient struct {
	addr    string
	maxIdle int

	mu          sync.Mutex
	idle        []*strictConn // LIFO
	dropped     int           // pooled connections found closed
	unsolicited int           // pooled connections with bytes nobody asked for
}

type strictConn struct {
	c  net.Conn
	br *bufio.Reader
}

func newStrictClient(addr string, workers int) loadClient {
	return &strictClient{addr: addr, maxIdle: workers}
}

// conn returns a pooled connection the server has not closed, or a new one.
func (s *strictClient) conn() (*strictConn, error) {
	for {
		s.mu.Lock()
		n := len(s.idle)
		if n == 0 {
			s.mu.Unlock()
			c, err := net.DialTimeout("tcp", s.addr, waitTimeout)
			if err != nil {
				return nil, err
			}
			return &strictConn{c: c, br: bufio.NewReader(c)}, nil
		}
		sc := s.idle[n-1]
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		alive, unsolicited := sc.alive()
		if alive {
			return sc, nil
		}
		sc.c.Close()
		s.mu.Lock()
		s.dropped++
		if unsolicited {
			s.unsolicited++
		}
		s.mu.Unlock()
	}
}

// alive peeks at the connection without blocking: a read timing out at
// once means nothing has arrived, neither bytes nor the server's FIN.
func (sc *strictConn) alive() (ok, unsolicited bool) {
	if sc.br.Buffered() > 0 {
		return false, true
	}
	if err := sc.c.SetReadDeadline(time.Unix(1, 0)); err != nil {
		return false, false
	}
	_, err := sc.br.Peek(1)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true, false
	}
	return false, err == nil
}

func (s *strictClient) put(sc *strictConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.idle) >= s.maxIdle {
		sc.c.Close()
		return
	}
	s.idle = append(s.idle, sc)
}

func (s *strictClient) do(w int, r loadRequest) (string, error) {
	sc, err := s.conn()
	if err != nil {
		return "", fmt.Errorf("%s %s: dialling: %w", r.method, r.path, err)
	}
	resp, got, err := sc.exchange(r)
	if err != nil {
		sc.c.Close()
		return "", fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	if resp.Close || r.last {
		sc.c.Close() // Connection: close: never reused
	} else {
		s.put(sc)
	}
	return resp.Header.Get("X-Replica"), checkAnswer(r, 1, resp, got)
}

// exchange writes r once and reads its response whole.
func (sc *strictConn) exchange(r loadRequest) (*http.Response, string, error) {
	if err := sc.c.SetDeadline(time.Now().Add(waitTimeout)); err != nil {
		return nil, "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: vip\r\n", r.method, r.path)
	if r.method == http.MethodPost {
		fmt.Fprintf(&b, "Content-Type: %s\r\nContent-Length: %d\r\n", r.contentType, len(r.body))
	}
	if r.id != "" {
		fmt.Fprintf(&b, "X-Request-Id: %s\r\n", r.id)
	}
	if r.last {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n")
	b.WriteString(r.body)
	if _, err := io.WriteString(sc.c, b.String()); err != nil {
		return nil, "", fmt.Errorf("writing the request: %w", err)
	}
	resp, err := http.ReadResponse(sc.br, &http.Request{Method: r.method})
	if err != nil {
		return nil, "", fmt.Errorf("reading the response: %w", err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, "", fmt.Errorf("reading the body: %w", err)
	}
	return resp, string(got), nil
}

func (s *strictClient) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range s.idle {
		sc.c.Close()
	}
	s.idle = nil
}

// poolStats returns how many pooled connections the strict client dropped
// because the server had closed them, and how many of those held bytes
// nobody asked for.
func (s *strictClient) poolStats() (dropped, unsolicited int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped, s.unsolicited
}
