// Command rolling-restart shows ebb's drain in one command, with nothing
// installed but Go:
//
//	go run ./examples/rolling-restart
//
// It starts two origins and two ebb replicas behind a Service VIP that
// behaves as kube-proxy's does (new connections go to the endpoints
// listed, existing ones stay where they are), sends keep-alive HTTP/1.1
// and HTTP/2 load and new HTTP/1.1 connections through it, holds
// WebSockets open through it that echo a message every 75ms, and
// replaces the replicas one by one as a Deployment's rolling update does:
// a new replica joins, the old one gets SIGTERM, and its endpoint leaves
// the VIP half a second later, as the removal propagates. A WebSocket
// that ends is noted by the close code its client received (1006 when
// the connection ended without a close frame), and its client
// reconnects through the VIP. It prints the errors the clients saw, the
// WebSockets' ends, each drain's phases, exit status and reason, and the
// path of its report (drain.report), and exits 1 if any client saw an
// error or a WebSocket ended other than with a close frame saying going
// away (1001) or normal closure (1000).
//
// Where nginx or HAProxy is installed, the same rolling restart runs
// through them too (their graceful stops: SIGQUIT, SIGUSR1, bounded at
// 3s by worker_shutdown_timeout and hard-stop-after, when the WebSockets
// they still hold are cut), and the client errors and WebSockets' ends
// are shown side by side. -peers none skips them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ebb-proxy/ebb/examples/echo"
	"github.com/ebb-proxy/ebb/examples/loadgen"
	"github.com/ebb-proxy/ebb/examples/vip"
)

// propagation is how long after a replica's stop signal its endpoint
// leaves the VIP: kube-proxy's lag, shortened for the demo.
const propagation = 500 * time.Millisecond

// wsClients is how many WebSocket clients each rolling restart has.
const wsClients = 8

// starter starts a replica of one kind of proxy in dir, in front of
// origins.
type starter func(dir, name string, origins []string) (*replica, error)

// proxyKind is a proxy the rolling restart runs through.
type proxyKind struct {
	name  string
	start starter
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rolling-restart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ebbBin := fs.String("ebb", "", "the ebb binary to run (default: built from this repository)")
	var sets setFlags
	fs.Var(&sets, "set", "passed on to each ebb replica as -set key=value (repeatable): try drain.accept_until=immediately and drain.delay=0s")
	peerList := fs.String("peers", "auto", "the peers to run the same restart through: auto (nginx and haproxy where installed), none, or a list such as nginx,haproxy")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	peers, err := choosePeers(*peerList)
	if err != nil {
		fmt.Fprintln(stderr, "rolling-restart:", err)
		return 2
	}
	dir, err := os.MkdirTemp("", "ebb-rolling-restart-")
	if err != nil {
		fmt.Fprintln(stderr, "rolling-restart:", err)
		return 1
	}
	if *ebbBin == "" {
		fmt.Fprintln(stdout, "building ebb ...")
		if *ebbBin, err = buildEbb(context.Background(), dir); err != nil {
			fmt.Fprintln(stderr, "rolling-restart:", err)
			return 1
		}
	}
	origins, stopOrigins, err := startOrigins(2)
	if err != nil {
		fmt.Fprintln(stderr, "rolling-restart: starting the origins:", err)
		return 1
	}
	defer stopOrigins()

	bin := *ebbBin
	kinds := []proxyKind{{"ebb", func(dir, name string, o []string) (*replica, error) { return startEbb(bin, dir, name, o, sets) }}}
	for _, p := range peers {
		start := func(dir, name string, o []string) (*replica, error) { return startNginx(p.bin, dir, name, o) }
		if p.name == "haproxy" {
			start = func(dir, name string, o []string) (*replica, error) { return startHAProxy(p.bin, dir, name, o) }
		}
		kinds = append(kinds, proxyKind{p.name, start})
	}
	fmt.Fprintf(stdout, "two origins, two replicas behind a Service VIP, keep-alive HTTP/1.1 and HTTP/2 load, new HTTP/1.1 connections\n"+
		"and %d WebSocket clients (each reconnects when its WebSocket ends);\n"+
		"each replica is replaced in turn: a new one joins, the old one gets its stop signal, its endpoint leaves the VIP %s later.\n", wsClients, propagation)
	if len(peers) == 0 && *peerList == "auto" {
		fmt.Fprintln(stdout, "(install nginx or haproxy to see the same restart through them)")
	}

	status := 0
	var table []string
	for _, k := range kinds {
		fmt.Fprintf(stdout, "\n== %s ==\n", k.name)
		sub := dir + "/" + k.name
		if err := os.Mkdir(sub, 0o755); err != nil {
			fmt.Fprintln(stderr, "rolling-restart:", err)
			return 1
		}
		o, err := rollingRestart(stdout, sub, origins, k.start)
		if err != nil {
			fmt.Fprintf(stderr, "rolling-restart: %s: %v\n", k.name, err)
			if k.name == "ebb" {
				return 1
			}
			table = append(table, fmt.Sprintf("  %-8s did not run: %v", k.name, err))
			continue
		}
		table = append(table, fmt.Sprintf("  %-8s %5d   %s", k.name, o.errs, o.wsEnds))
		if k.name == "ebb" && (o.errs > 0 || !o.clean || !o.wsClean) {
			status = 1
		}
	}
	fmt.Fprintln(stdout, "\nclient errors, and how the WebSockets ended, during the same rolling restart:")
	fmt.Fprintln(stdout, strings.Join(table, "\n"))
	fmt.Fprintf(stdout, "logs, configurations and reports: %s\n", dir)
	if status != 0 {
		fmt.Fprintln(stdout, "FAIL: ebb's rolling restart was not clean")
	}
	return status
}

// outcome is what one rolling restart's clients and replicas saw.
type outcome struct {
	errs    int    // client errors, HTTP and WebSocket
	clean   bool   // every replica replaced stopped with status 0
	wsClean bool   // every WebSocket ended with a close frame (1001 or 1000), and each client reconnected
	wsEnds  string // the WebSockets' ends by close code, as "websockets: 8 ended: 8 × 1001 going away, ..."
}

// rollingRestart replaces two replicas made by start, one at a time,
// under load, and reports what happened on w.
func rollingRestart(w io.Writer, dir string, origins []string, start starter) (outcome, error) {
	began := time.Now()
	v1, err := vip.New()
	if err != nil {
		return outcome{}, err
	}
	defer v1.Close()
	v2, err := vip.New()
	if err != nil {
		return outcome{}, err
	}
	defer v2.Close()

	var live []*replica
	defer func() {
		for _, r := range live {
			r.cmd.Process.Kill()
			<-r.exited
		}
	}()
	join := func(name string) (*replica, error) {
		r, err := start(dir, name, origins)
		if err != nil {
			return nil, err
		}
		live = append(live, r)
		if err := r.startedAfter(10 * time.Second); err != nil {
			return nil, err
		}
		v1.Add(r.h1)
		v2.Add(r.h2)
		return r, nil
	}
	var old []*replica
	for _, name := range []string{"a", "b"} {
		r, err := join(name)
		if err != nil {
			return outcome{}, err
		}
		old = append(old, r)
	}
	// The load: keep-alive HTTP/1.1 and HTTP/2 clients, as services
	// calling services do, and new HTTP/1.1 clients, each with one request
	// on a new connection, as browsers and short-lived jobs arrive.
	l, err := loadgen.Start(loadgen.Spec{Abandon: true, Groups: []loadgen.Group{
		{Kind: loadgen.Go("HTTP/1.1 keep-alive", loadgen.GoConfig{}), Addr: v1.Addr(), Workers: 4, Request: loadgen.Greeting},
		{Kind: loadgen.Go("HTTP/2 keep-alive", loadgen.GoConfig{HTTP2: true}), Addr: v2.Addr(), Workers: 4, Request: loadgen.Greeting},
		{Kind: loadgen.Go("HTTP/1.1 new connections", loadgen.GoConfig{NoKeepAlive: true}), Addr: v1.Addr(), Workers: 2,
			Request: loadgen.Greeting},
	}})
	if err != nil {
		return outcome{}, err
	}
	defer l.Close()
	// And WebSockets, held open as a chat's clients hold them, through
	// the HTTP/1.1 VIP.
	ws := startWS("ws://"+v1.Addr(), wsClients)
	defer ws.Stop()
	if err := await(10*time.Second, func() bool { ok, _ := l.Counts(); return ok >= 300 && ws.ready() }); err != nil {
		return outcome{}, errors.New("the load did not get going: no answers through the replicas")
	}

	clean := true
	for _, r := range old {
		if _, err := join(r.name + "2"); err != nil {
			return outcome{}, err
		}
		r.cmd.Process.Signal(r.stop)
		unlisted := time.AfterFunc(propagation, func() {
			v1.Remove(r.h1)
			v2.Remove(r.h2)
		})
		took, err := r.wait(20 * time.Second)
		unlisted.Stop()
		v1.Remove(r.h1)
		v2.Remove(r.h2)
		live = slices.DeleteFunc(live, func(x *replica) bool { return x == r })
		clean = clean && err == nil && r.code == 0
		describe(w, r, took, err)
	}
	// The load goes on a moment on the replacements, then stops.
	tail := time.NewTimer(propagation)
	<-tail.C
	l.Stop()
	ws.Stop()
	errs, lines := l.Report()
	wsErrs, wsClean, wsEnds, wsLines := ws.Report()
	// The kinds' lines, then their first errors.
	at := slices.IndexFunc(lines, func(s string) bool { return strings.HasPrefix(s, " ") })
	if at < 0 {
		at = len(lines)
	}
	lines = slices.Concat(lines[:at], wsLines[:1], lines[at:], wsLines[1:])
	for _, s := range lines {
		fmt.Fprintln(w, "  "+s)
	}
	fmt.Fprintln(w, "  "+wsEnds)
	errs += wsErrs
	fmt.Fprintf(w, "  client errors: %d, in %.1fs\n", errs, time.Since(began).Seconds())
	// The replacements stop as well; nothing sends to them any more.
	for _, r := range live {
		r.cmd.Process.Signal(r.stop)
	}
	for _, r := range live {
		r.wait(20 * time.Second)
	}
	live = nil
	return outcome{errs, clean, wsClean, wsEnds}, nil
}

// describe prints how a replica's stop went.
func describe(w io.Writer, r *replica, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(w, "  replica %s: %s, %s after %.2fs", r.name, signalName(r.stop), r.exit, took.Seconds())
	if r.reason != "" {
		fmt.Fprintf(w, " (%s)", r.reason)
	}
	fmt.Fprintln(w)
	if err != nil {
		fmt.Fprintf(w, "    %v\n", err)
	}
	if r.code != 0 {
		fmt.Fprintf(w, "    the end of its log (%s):\n", r.log)
		for _, l := range lastLines(r.log, 5) {
			fmt.Fprintf(w, "      %s\n", l)
		}
	}
	if len(r.phases) > 0 {
		fmt.Fprintf(w, "    drain phases: %s\n", strings.Join(r.phases, ", "))
	}
	if r.report != "" {
		fmt.Fprintf(w, "    report: %s\n", r.report)
	}
}

// lastLines returns the last n lines of the file at path.
func lastLines(path string, n int) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return lines[max(0, len(lines)-n):]
}

// await polls cond until it holds, at most d.
func await(d time.Duration, cond func() bool) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return errors.New("timed out")
		case <-tick.C:
		}
	}
	return nil
}

// signalName is a stop signal as operators write it.
func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGUSR1:
		return "SIGUSR1"
	}
	return s.String()
}

// setFlags collects -set key=value.
type setFlags []string

func (s *setFlags) String() string { return strings.Join(*s, " ") }

func (s *setFlags) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("expected key=value, got %q", v)
	}
	*s = append(*s, v)
	return nil
}

type peer struct{ name, bin string }

// choosePeers turns -peers into the peers to run.
func choosePeers(list string) ([]peer, error) {
	var names []string
	switch list {
	case "none", "":
	case "auto":
		for _, n := range []string{"nginx", "haproxy"} {
			if findBinary(n) != "" {
				names = append(names, n)
			}
		}
	default:
		names = strings.Split(list, ",")
	}
	var out []peer
	for _, n := range names {
		if n != "nginx" && n != "haproxy" {
			return nil, fmt.Errorf("-peers: expected auto, none, or names among nginx and haproxy, got %q", n)
		}
		bin := findBinary(n)
		if bin == "" {
			return nil, fmt.Errorf("-peers: %s is not installed", n)
		}
		out = append(out, peer{n, bin})
	}
	return out, nil
}

// startOrigins starts n origins on loopback; each answers as
// examples/origin does, naming itself, and echoes the messages of
// WebSockets opened on /ws.
func startOrigins(n int) ([]string, func(), error) {
	var addrs []string
	var srvs []*http.Server
	var serving sync.WaitGroup
	var ws echo.WebSockets
	stop := func() {
		for _, s := range srvs {
			s.Close()
		}
		serving.Wait()
		ws.Close() // Close leaves hijacked connections alone
	}
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stop()
			return nil, nil, err
		}
		name := fmt.Sprintf("origin-%d", i+1)
		mux := http.NewServeMux()
		mux.Handle("/ws", &ws)
		mux.Handle("/", echo.Handler(name))
		s := &http.Server{Handler: mux}
		srvs = append(srvs, s)
		serving.Go(func() { s.Serve(ln) })
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, stop, nil
}
