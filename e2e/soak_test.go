package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ebb-proxy/ebb/examples/echo"
)

// The soak: many connection lifecycles of each kind, and many endpoint
// changes under load, each against an ebb of its own, after which ebb's
// goroutines and open descriptors must be back to what they were before
// (see soakProbe for how they are read).
const (
	soakLifecycles = 10000 // connections of each kind
	soakWorkers    = 4     // clients opening them, one connection after the other each
	soakCycles     = 1000  // endpoint additions, each followed by its removal
)

// soakSlack is what an ebb that has served may hold for good that a
// fresh one did not: nothing, for every kind. All it keeps for a while
// after its connections have closed ends on its own, and the wait for
// it is part of the check: fasthttp's idle workers (one per HTTP/1
// connection served at once, ended 10 to 20 s after their last one),
// the HTTP/2 engine's stream workers (ended with the last connection),
// pooled upstream connections and their pool's cleaner goroutine (closed
// and ended after the cluster's timeouts.idle, 4 s by default). The
// admin connection the readings are taken on is in the baseline too.
var soakSlack = soakCounts{}

// TestSoak runs each kind at the same time, each against its own ebb, so
// that each one's counts are its own. The subtests are run from
// goroutines rather than marked parallel, so that they overlap whatever
// -parallel is, their waits for ebb to settle included.
func TestSoak(t *testing.T) {
	long(t)
	t.Parallel()
	kinds := []struct {
		name string
		run  func(*testing.T)
	}{
		{"http1", func(t *testing.T) { soakConnections(t, soakHTTP1) }},
		{"h2c", func(t *testing.T) { soakConnections(t, soakH2C) }},
		{"http1-tls", func(t *testing.T) { soakConnections(t, soakHTTP1TLS) }},
		{"h2-tls", func(t *testing.T) { soakConnections(t, soakH2TLS) }},
		{"websocket", func(t *testing.T) { soakConnections(t, soakWebSocket) }},
		{"endpoints", soakEndpoints},
	}
	var wg sync.WaitGroup
	for _, k := range kinds {
		wg.Go(func() { t.Run(k.name, k.run) })
	}
	wg.Wait()
}

// soakConnKind is one way of connecting to ebb; soakClient.lifecycle
// says what each does.
type soakConnKind int

const (
	soakHTTP1     soakConnKind = iota // HTTP/1.1 keep-alive, cleartext
	soakH2C                           // HTTP/2 with prior knowledge
	soakHTTP1TLS                      // HTTP/1.1 over TLS (ALPN http/1.1)
	soakH2TLS                         // HTTP/2 over TLS (ALPN h2)
	soakWebSocket                     // a WebSocket upgrade, cleartext
)

func (k soakConnKind) tls() bool { return k == soakHTTP1TLS || k == soakH2TLS }
func (k soakConnKind) h2() bool  { return k == soakH2C || k == soakH2TLS }

// soakOrigin answers GET with the request's path, echoes a POST's body,
// and echoes WebSocket messages on /ws until the client closes; those
// still open are closed at cleanup.
func soakOrigin(t *testing.T) http.Handler {
	var ws echo.WebSockets
	t.Cleanup(ws.Close)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/ws":
			ws.ServeHTTP(w, r)
		case r.Method == http.MethodPost:
			// Read whole before answering: net/http's HTTP/1 server may
			// not let a handler read a body once it has begun its answer.
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.Write(body)
		default:
			io.WriteString(w, r.URL.Path)
		}
	})
}

// soakConfig is the configuration of the soak's ebb: one listener
// ("public") sending everything to one cluster ("app") at origin, and
// the admin server with pprof.
func soakConfig(origin string, listener []string) string {
	return strings.Replace(oneClusterYAML(origin, listener, nil),
		"admin: { address: 127.0.0.1:0 }", "admin: { address: 127.0.0.1:0, pprof: true }", 1)
}

// soakConnections opens soakLifecycles connections of kind k to a fresh
// ebb, from soakWorkers clients at once, each connecting, doing what k
// does and closing, one connection after the other. Every answer must be
// right, and then ebb's goroutines and descriptors must return to what
// they were before the first connection.
func soakConnections(t *testing.T, k soakConnKind) {
	origin := newOrigin(t, soakOrigin(t))
	var listener []string
	var pool *x509.CertPool
	if k.tls() {
		var certFile, keyFile string
		certFile, keyFile, pool = writeTestCert(t, t.TempDir())
		listener = append(listener, fmt.Sprintf("tls: { cert: %q, key: %q }", certFile, keyFile))
	}
	e := startEbb(t, soakConfig(hostPort(origin), listener))
	probe := newSoakProbe(t, e)
	base := probe.baseline()

	c := newSoakClient(k, e.addr("public"), pool)
	start := time.Now()
	var next atomic.Int64
	var fails soakFailures
	var wg sync.WaitGroup
	for range soakWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= soakLifecycles || t.Context().Err() != nil || fails.many() {
					return
				}
				ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
				if err := c.lifecycle(ctx, i); err != nil {
					fails.add(fmt.Errorf("connection %d: %w", i, err))
				}
				cancel()
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	peak := probe.peak(done)
	took := time.Since(start)
	if n, first := fails.get(); n > 0 {
		t.Errorf("%d of %d connections failed (the soak stops at 100); the first:\n%s", n, soakLifecycles, strings.Join(first, "\n"))
	}
	what := fmt.Sprintf("%d connections in %s (%d clients at once)", soakLifecycles, took.Round(time.Millisecond), soakWorkers)
	if k.tls() {
		what += fmt.Sprintf(", %d TLS sessions resumed", c.resumed.Load())
	}
	soakCheck(t, probe, base, peak, what)
}

// The soak tests' clients: one connection's lifecycle of each kind, on
// raw sockets (HTTP/1.1 written and read by hand, HTTP/2 frame by frame)
// so that 10,000 of them cost the test process little next to ebb.

// soakClient opens one kind of connection to ebb's listener.
type soakClient struct {
	kind soakConnKind
	addr string
	// The TLS kinds: trusting ebb's certificate, offering one protocol by
	// ALPN and X25519 alone (as curl on OpenSSL before 3.5 does: the
	// post-quantum hybrid would cost the race-instrumented client more
	// than all the rest it does); full has every handshake a full one,
	// resume resumes the session of an earlier connection, as browsers do.
	full, resume *tls.Config
	resumed      atomic.Int64 // handshakes that resumed a session
	ws           websocket.Dialer
}

func newSoakClient(k soakConnKind, addr string, pool *x509.CertPool) *soakClient {
	c := &soakClient{kind: k, addr: addr, ws: websocket.Dialer{HandshakeTimeout: waitTimeout}}
	if k.tls() {
		proto := "http/1.1"
		if k.h2() {
			proto = "h2"
		}
		c.full = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{proto}, CurvePreferences: []tls.CurveID{tls.X25519}}
		c.resume = c.full.Clone()
		c.resume.ClientSessionCache = tls.NewLRUClientSessionCache(1)
	}
	return c
}

// soakPOST is the body of the lifecycles' POST: i's own bytes, 640 or so.
func soakPOST(i int) string { return strings.Repeat(fmt.Sprintf("body of %d;", i), 50) }

// lifecycle runs connection i of the soak, checking every answer:
//
//   - HTTP/1.1, cleartext or TLS: a GET, a POST (its body echoed) and a
//     GET, one after the other; ebb closes after the last on every other
//     connection (Connection: close), the client on the others;
//   - HTTP/2, h2c or h2: the same three as streams at once; the client
//     sends GOAWAY before closing on every other connection;
//   - TLS: half the handshakes are full ones, half resume a session;
//   - WebSocket: the upgrade, a message echoed, the close handshake.
func (c *soakClient) lifecycle(ctx context.Context, i int) error {
	if c.kind == soakWebSocket {
		return c.webSocket(ctx, i)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if c.kind.tls() {
		// Every other pair of connections resumes sessions: half the
		// handshakes are full ones, and each way of closing (see
		// soakHTTP1Conn, soakH2) follows both kinds.
		cfg := c.full
		if i/2%2 == 1 {
			cfg = c.resume
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
		st := tc.ConnectionState()
		if got, want := st.NegotiatedProtocol, cfg.NextProtos[0]; got != want {
			return fmt.Errorf("ALPN chose %q, want %q", got, want)
		}
		if st.DidResume {
			c.resumed.Add(1)
		}
		conn = tc
	}
	if c.kind.h2() {
		return soakH2(conn, c.kind.tls(), i)
	}
	return soakHTTP1Conn(conn, i)
}

// soakHTTP1Conn sends three requests one after the other on conn (GET,
// POST, GET) and checks each answer. On every other connection the last
// request asks ebb to close (Connection: close), and ebb must then end
// the connection; on the others the client closes it.
func soakHTTP1Conn(conn net.Conn, i int) error {
	br := bufio.NewReader(conn)
	post := soakPOST(i)
	for j := range 3 {
		path := fmt.Sprintf("/soak/%d/%d", i, j)
		want, req := path, "GET "+path+" HTTP/1.1\r\nHost: soak.test\r\n"
		if j == 1 {
			want = post
			req = fmt.Sprintf("POST %s HTTP/1.1\r\nHost: soak.test\r\nContent-Length: %d\r\n\r\n%s", path, len(post), post)
		} else if j == 2 && i%2 == 1 {
			req += "Connection: close\r\n\r\n"
		} else {
			req += "\r\n"
		}
		if _, err := io.WriteString(conn, req); err != nil {
			return fmt.Errorf("request %d: writing: %w", j, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return fmt.Errorf("request %d: reading the response: %w", j, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("request %d: reading the body: %w", j, err)
		}
		if resp.StatusCode != http.StatusOK || string(body) != want {
			return fmt.Errorf("request %d: %s %d, %d bytes %.60q; want 200 %.60q", j, resp.Proto, resp.StatusCode, len(body), body, want)
		}
	}
	if i%2 == 1 {
		if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			return fmt.Errorf("after Connection: close: read %d bytes, %v; want ebb to close (EOF)", n, err)
		}
	}
	return nil
}

// soakH2 opens three streams at once on conn (GET, POST, GET), checks
// each answer, and leaves: with a GOAWAY on every other connection, by
// just closing on the others.
func soakH2(conn net.Conn, tls bool, i int) error {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	bw := bufio.NewWriter(conn)
	fr := http2.NewFramer(bw, bufio.NewReader(conn))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(bw, http2.ClientPreface); err != nil {
		return err
	}
	if err := fr.WriteSettings(); err != nil {
		return err
	}
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	post := soakPOST(i)
	want := map[uint32]string{}
	got := map[uint32][]byte{}
	for j := range 3 {
		id := uint32(2*j + 1)
		path := fmt.Sprintf("/soak/%d/%d", i, j)
		method := "GET"
		want[id] = path
		if j == 1 {
			method, want[id] = "POST", post
		}
		hbuf.Reset()
		for _, f := range [][2]string{{":method", method}, {":scheme", scheme}, {":authority", "soak.test"}, {":path", path}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if j == 1 {
			enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(post))})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndStream: j != 1, EndHeaders: true}); err != nil {
			return err
		}
		if j == 1 {
			if err := fr.WriteData(id, true, []byte(post)); err != nil {
				return err
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing the streams: %w", err)
	}
	status := map[uint32]string{}
	for done := 0; done < 3; {
		f, err := fr.ReadFrame()
		if err != nil {
			return fmt.Errorf("reading frames (%d of 3 streams done): %w", done, err)
		}
		end := false
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					return err
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				if err := fr.WritePing(true, f.Data); err != nil {
					return err
				}
			}
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "" {
				status[f.StreamID] = s
			}
			end = f.StreamEnded()
		case *http2.DataFrame:
			got[f.StreamID] = append(got[f.StreamID], f.Data()...)
			end = f.StreamEnded()
		case *http2.WindowUpdateFrame:
		default:
			return fmt.Errorf("unexpected frame %v (%d of 3 streams done)", f.Header(), done)
		}
		if end {
			done++
		}
		if err := bw.Flush(); err != nil {
			return err
		}
	}
	for id, w := range want {
		if status[id] != "200" || string(got[id]) != w {
			return fmt.Errorf("stream %d: status %q, %d bytes %.60q; want 200 %.60q", id, status[id], len(got[id]), got[id], w)
		}
	}
	if i%2 == 0 {
		if err := fr.WriteGoAway(0, http2.ErrCodeNo, nil); err != nil {
			return err
		}
		return bw.Flush()
	}
	return nil
}

// webSocket upgrades, has one message echoed, and closes with the close
// handshake.
func (c *soakClient) webSocket(ctx context.Context, i int) error {
	ws, _, err := c.ws.DialContext(ctx, "ws://"+c.addr+"/ws", nil)
	if err != nil {
		return fmt.Errorf("upgrading: %w", err)
	}
	defer ws.Close()
	if d, ok := ctx.Deadline(); ok {
		ws.SetReadDeadline(d)
		ws.SetWriteDeadline(d)
	}
	msg := fmt.Appendf(nil, "message %d", i)
	if err := ws.WriteMessage(websocket.TextMessage, msg); err != nil {
		return fmt.Errorf("writing: %w", err)
	}
	if typ, got, err := ws.ReadMessage(); err != nil || typ != websocket.TextMessage || !bytes.Equal(got, msg) {
		return fmt.Errorf("echo: type %d %q, %v; want type %d %q", typ, got, err, websocket.TextMessage, msg)
	}
	if err := ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")); err != nil {
		return fmt.Errorf("writing the close frame: %w", err)
	}
	if _, _, err := ws.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		return fmt.Errorf("after the close frame: %v, want the origin's close frame (1000)", err)
	}
	return nil
}

// soakCheck waits for ebb to return to base (see soakProbe.settle) and
// logs the figures: before the soak, at its peak (sampled), and after.
func soakCheck(t *testing.T, probe *soakProbe, base soakReading, peak soakCounts, what string) {
	t.Helper()
	start := time.Now()
	after := probe.settle(base, soakSlack)
	rss, heap := probe.rssKiB(), probe.heapKiB()
	t.Logf("%s; peak %s; settled in %s: goroutines %d before, %d after; fds %d before, %d after; RSS %d KiB before, %d KiB after (live heap %d KiB before, %d KiB after)",
		what, peak, time.Since(start).Round(time.Millisecond), base.goroutines, after.goroutines, base.fds, after.fds,
		base.rss, rss, base.heap, heap)
	if after.soakCounts != base.soakCounts {
		// Fewer than at the start: not a leak, but worth a look.
		t.Logf("below the baseline:\n%s", probe.explain(base, after, false))
	}
}

// soakFailures counts failures and keeps the first few.
type soakFailures struct {
	mu    sync.Mutex
	n     int
	first []string
}

func (f *soakFailures) add(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if len(f.first) < 5 {
		f.first = append(f.first, err.Error())
	}
}

// many reports whether there have been too many failures to go on:
// whatever is wrong, the first ones say it.
func (f *soakFailures) many() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n >= 100
}

func (f *soakFailures) get() (int, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n, slices.Clone(f.first)
}

// soakEndpoints changes the endpoints of two clusters (an http1 and an
// h2c upstream), both fed by endpoint files, soakCycles times while
// clients send requests to both over HTTP/1.1 and h2c: each cycle adds
// origin b to origin a and waits until b has answered requests of both
// clusters, then removes it and waits until ebb no longer lists it. Every
// request must succeed, and afterwards ebb's goroutines and descriptors
// must be back to what they were before the first request.
func soakEndpoints(t *testing.T) {
	a := newSoakEndpointOrigin(t, "a")
	b := newSoakEndpointOrigin(t, "b")
	dir := t.TempDir()
	files := []string{filepath.Join(dir, "h1.yaml"), filepath.Join(dir, "h2c.yaml")}
	write := func(addrs ...string) {
		t.Helper()
		var list strings.Builder
		for _, addr := range addrs {
			fmt.Fprintf(&list, "- %s\n", addr)
		}
		for _, f := range files {
			// An atomic rename, as configuration management does.
			if err := os.WriteFile(f+".tmp", []byte(list.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(f+".tmp", f); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(a.addr)
	e := startEbb(t, fmt.Sprintf(`
admin: { address: 127.0.0.1:0, pprof: true }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes:
      - { match: { path_prefix: "/h2c/" }, cluster: h2c }
      - { cluster: h1 }
clusters:
  - name: h1
    discovery: { file: %q }
  - name: h2c
    protocol: h2c
    discovery: { file: %q }
`, files[0], files[1]))
	probe := newSoakProbe(t, e)
	base := probe.baseline()

	// The load: two HTTP/1.1 keep-alive clients and two h2c clients, each
	// alternating between the clusters, one request after the other.
	var fails soakFailures
	var sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var transports []*http.Transport
	for w := range 4 {
		var p http.Protocols
		if w%2 == 0 {
			p.SetHTTP1(true)
		} else {
			p.SetUnencryptedHTTP2(true)
		}
		tr := &http.Transport{Protocols: &p, DisableCompression: true, MaxIdleConnsPerHost: 1, ResponseHeaderTimeout: waitTimeout}
		transports = append(transports, tr)
		client := &http.Client{Transport: tr, Timeout: waitTimeout}
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				path := fmt.Sprintf("/%d/%d", w, i)
				if i%2 == 1 {
					path = "/h2c" + path
				}
				sent.Add(1)
				if err := soakGet(client, "http://"+e.addr("public")+path, p.HTTP1()); err != nil {
					fails.add(err)
					if fails.many() {
						return
					}
				}
			}
		})
	}
	stopLoad := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
		for _, tr := range transports {
			tr.CloseIdleConnections()
		}
	})
	defer stopLoad()

	start := time.Now()
	var peak soakCounts
	for cycle := range soakCycles {
		if fails.many() {
			break // the load has stopped
		}
		// b answering requests of both clusters says that both have it
		// (and connections to it). Its removal must be seen before the
		// next addition, or the file source could read the addition at
		// the removal's event (it compares contents) and skip the removal.
		seen := b.counts()
		write(a.addr, b.addr)
		b.await(t, func(n [2]int64) bool { return n[0] > seen[0] && n[1] > seen[1] },
			fmt.Sprintf("cycle %d: b to answer requests of both clusters once added", cycle))
		if cycle%50 == 0 {
			peak = peak.max(probe.read().soakCounts)
		}
		write(a.addr)
		soakAwaitEndpoints(t, probe, cycle, []string{a.addr})
	}
	took := time.Since(start)
	stopLoad()
	if n, first := fails.get(); n > 0 {
		t.Errorf("%d of %d requests failed (the load stops at 100); the first:\n%s", n, sent.Load(), strings.Join(first, "\n"))
	}
	bn := b.counts()
	soakCheck(t, probe, base, peak, fmt.Sprintf("%d endpoint cycles in %s with %d requests (b answered %d of the http1 cluster's, %d of the h2c one's)",
		soakCycles, took.Round(time.Millisecond), sent.Load(), bn[0], bn[1]))
}

// soakGet sends one GET and checks that an origin answered it with its
// name and the path, over the client's protocol.
func soakGet(c *http.Client, url string, http1 bool) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("GET %s: reading the body: %w", url, err)
	}
	wantMajor := 2
	if http1 {
		wantMajor = 1
	}
	_, path, _ := strings.Cut(strings.TrimPrefix(url, "http://"), "/")
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != wantMajor ||
		(string(body) != "a /"+path && string(body) != "b /"+path) {
		return fmt.Errorf("GET %s: %s %d %q; want HTTP/%d 200 from a or b", url, resp.Proto, resp.StatusCode, body, wantMajor)
	}
	return nil
}

// soakEndpointOrigin is an origin of the endpoints soak: HTTP/1.1 and
// h2c on one port, answering with its name and the path, counting the
// requests of each protocol (so of each cluster).
type soakEndpointOrigin struct {
	addr string

	mu      sync.Mutex
	n       [2]int64      // HTTP/1.1, HTTP/2
	changed chan struct{} // closed and replaced at each request
}

func newSoakEndpointOrigin(t *testing.T, name string) *soakEndpointOrigin {
	o := &soakEndpointOrigin{changed: make(chan struct{})}
	srv := newUnstartedOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, name+" "+r.URL.Path)
		o.mu.Lock()
		o.n[r.ProtoMajor-1]++
		close(o.changed)
		o.changed = make(chan struct{})
		o.mu.Unlock()
	}))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	o.addr = hostPort(srv)
	return o
}

func (o *soakEndpointOrigin) counts() [2]int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

// await waits until cond holds of the counts, failing the test after
// waitTimeout.
func (o *soakEndpointOrigin) await(t *testing.T, cond func([2]int64) bool, what string) {
	t.Helper()
	timeout, stop := after(waitTimeout)
	defer stop()
	for {
		o.mu.Lock()
		n, changed := o.n, o.changed
		o.mu.Unlock()
		if cond(n) {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("timed out after %s waiting for %s (counts %v)", waitTimeout, what, n)
		}
	}
}

// soakAwaitEndpoints polls /endpoints until both clusters list exactly
// want as ready (an endpoint removed with requests in flight is listed
// as removed until they end), failing the test after waitTimeout.
func soakAwaitEndpoints(t *testing.T, probe *soakProbe, cycle int, want []string) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	timeout, stop := after(waitTimeout)
	defer stop()
	for {
		body, err := probe.get("/endpoints")
		if err != nil {
			t.Fatalf("cycle %d: /endpoints: %v", cycle, err)
		}
		if soakListed(t, body, want) {
			return
		}
		select {
		case <-tick.C:
		case <-timeout:
			t.Fatalf("cycle %d: /endpoints did not list %v as the ready endpoints of both clusters within %s:\n%s", cycle, want, waitTimeout, body)
		}
	}
}

// soakListed reports whether both clusters in an /endpoints answer list
// exactly want as their ready endpoints.
func soakListed(t *testing.T, body []byte, want []string) bool {
	t.Helper()
	var clusters []struct {
		Endpoints []struct {
			Address string `json:"address"`
			State   string `json:"state"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(body, &clusters); err != nil {
		t.Fatalf("/endpoints: %v\n%s", err, body)
	}
	if len(clusters) != 2 {
		t.Fatalf("/endpoints lists %d clusters, want 2:\n%s", len(clusters), body)
	}
	for _, c := range clusters {
		var ready []string
		for _, ep := range c.Endpoints {
			if ep.State == "ready" {
				ready = append(ready, ep.Address)
			}
		}
		if !slices.Equal(ready, want) {
			return false
		}
	}
	return true
}
