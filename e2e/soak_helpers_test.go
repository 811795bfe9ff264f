package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The soak tests' probe: what one ebb process holds, read from outside.

// soakCounts is what the soak tests watch return to its baseline.
type soakCounts struct {
	goroutines int // ebb's, but for its admin connection's (see soakProbe)
	fds        int // entries of /proc/PID/fd
}

func (c soakCounts) String() string {
	return fmt.Sprintf("%d goroutines, %d fds", c.goroutines, c.fds)
}

// max returns the larger of each count.
func (c soakCounts) max(o soakCounts) soakCounts {
	return soakCounts{goroutines: max(c.goroutines, o.goroutines), fds: max(c.fds, o.fds)}
}

// soakReading is one look at an ebb process: the counts, and what they
// are made of, for a failure to say what is new.
type soakReading struct {
	soakCounts
	stacks    map[string]int    // goroutines counted, by stack (see goroutineStacks)
	fdTargets map[string]string // descriptors by number: what each refers to
	rss, heap int64             // KiB: resident memory, live heap after a collection (baseline only)
}

// Generous upper bounds: they only decide how long a leak (or an ebb
// that never settles after starting) takes to fail. What ebb keeps for a
// while on purpose after its connections have closed ends well within
// soakSettleTimeout: fasthttp's idle workers after 10 to 20 s, pooled
// upstream connections after the clusters' timeouts.idle (4 s).
const (
	soakSettleTimeout = 90 * time.Second
	soakStartTimeout  = 30 * time.Second
)

// soakPoll is how often the probe reads ebb while it waits; soakSteady
// is how many readings in a row must agree for a fresh ebb's baseline.
const (
	soakPoll   = 100 * time.Millisecond
	soakSteady = 10
)

// soakProbe reads an ebb process's goroutines (the goroutine profile of
// /debug/pprof/: the soak's configurations set admin.pprof), its open
// file descriptors (/proc/PID/fd) and its resident memory
// (/proc/PID/status).
//
// Its client keeps one keep-alive connection to the admin server (which
// has no idle timeout), so that every reading is taken with the same
// admin connection open: its descriptor is in the baseline as in every
// later reading. The goroutines serving that connection are not counted
// (those whose stack holds net/http's connection or background read:
// ebb serves nothing else with net/http), nor goroutines on their way out
// (no frame left): net/http ends a request's background read
// asynchronously, so the previous reading's may or may not still be
// there, and every count would be off by one at random.
type soakProbe struct {
	t      *testing.T
	e      *ebbProc
	client *http.Client
}

func newSoakProbe(t *testing.T, e *ebbProc) *soakProbe {
	tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
	// Registered after startEbb's cleanup, so it runs first.
	t.Cleanup(tr.CloseIdleConnections)
	return &soakProbe{t: t, e: e, client: &http.Client{Transport: tr, Timeout: waitTimeout}}
}

// get returns the body of the admin path, or an error.
func (p *soakProbe) get(path string) ([]byte, error) {
	resp, err := p.client.Get(p.e.adminURL(path))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d: %s", path, resp.StatusCode, body)
	}
	return body, nil
}

// read reads ebb's goroutines, then its descriptors.
func (p *soakProbe) read() soakReading {
	p.t.Helper()
	body, err := p.get("/debug/pprof/goroutine?debug=1")
	if err != nil {
		p.t.Fatalf("reading ebb's goroutine profile: %v", err)
	}
	r := soakReading{stacks: map[string]int{}, fdTargets: p.fds()}
	for stack, n := range goroutineStacks(body) {
		if stack == "" || strings.Contains(stack, "\tnet/http.(*conn).serve ") ||
			strings.Contains(stack, "\tnet/http.(*connReader).backgroundRead ") {
			continue
		}
		r.stacks[stack] = n
		r.goroutines += n
	}
	r.fds = len(r.fdTargets)
	return r
}

// fds returns what each of ebb's open descriptors refers to, by number.
func (p *soakProbe) fds() map[string]string {
	p.t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", p.e.pid())
	ents, err := os.ReadDir(dir)
	if err != nil {
		p.t.Fatalf("listing ebb's descriptors: %v", err)
	}
	out := make(map[string]string, len(ents))
	for _, ent := range ents {
		// One closed since the listing reads as ""; it was open.
		target, _ := os.Readlink(filepath.Join(dir, ent.Name()))
		out[ent.Name()] = target
	}
	return out
}

// rssKiB returns ebb's resident memory.
func (p *soakProbe) rssKiB() int64 { return procStatusKiB(p.t, p.e.pid(), "VmRSS") }

// heapKiB returns ebb's live heap (HeapAlloc) after a garbage collection,
// which the heap profile runs first (gc=1): what it holds, as against the
// memory its runtime keeps from an earlier peak, which RSS shows.
func (p *soakProbe) heapKiB() int64 {
	p.t.Helper()
	body, err := p.get("/debug/pprof/heap?debug=1&gc=1")
	if err != nil {
		p.t.Fatalf("reading ebb's heap profile: %v", err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "# HeapAlloc = "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				p.t.Fatalf("heap profile line %q: %v", line, err)
			}
			return n >> 10
		}
	}
	p.t.Fatal("ebb's heap profile has no HeapAlloc")
	return 0
}

// peak reads ebb every second until done is closed, and returns the
// largest counts seen (a sample: the soak's shape, not a bound).
func (p *soakProbe) peak(done <-chan struct{}) soakCounts {
	p.t.Helper()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var peak soakCounts
	for {
		select {
		case <-done:
			return peak
		case <-tick.C:
			peak = peak.max(p.read().soakCounts)
		}
	}
}

// baseline waits until a fresh ebb has settled after starting (its
// watchers of files and signals start after it logs "ebb started": a
// goroutine or an inotify descriptor may still be on its way), that is
// until soakSteady readings in a row agree in every goroutine's stack
// and every descriptor, and returns the last, with ebb's memory.
func (p *soakProbe) baseline() soakReading {
	p.t.Helper()
	r := p.steady()
	r.rss, r.heap = p.rssKiB(), p.heapKiB()
	return r
}

// steady reads ebb until soakSteady readings in a row agree.
func (p *soakProbe) steady() soakReading {
	p.t.Helper()
	tick := time.NewTicker(soakPoll)
	defer tick.Stop()
	deadline := time.NewTimer(soakStartTimeout)
	defer deadline.Stop()
	last := p.read()
	for same := 1; same < soakSteady; {
		select {
		case <-tick.C:
		case <-deadline.C:
			p.t.Fatalf("ebb did not settle after starting within %s: %d readings in a row agreed, the last %s", soakStartTimeout, same, last.soakCounts)
		}
		r := p.read()
		if maps.Equal(r.stacks, last.stacks) && maps.Equal(r.fdTargets, last.fdTargets) {
			same++
		} else {
			same = 1
		}
		last = r
	}
	return last
}

// goroutineStacks parses a goroutine profile written with debug=1:
//
//	goroutine profile: total 7
//	2 @ 0x47a2ce 0x4114a5 ...
//	#	0x4a1b2c	internal/poll.runtime_pollWait+0x85	/usr/local/go/src/runtime/netpoll.go:351
//	...
//
// into counts by stack, each written as its frames' functions and lines
// (without addresses and offsets), one a line. A goroutine that is
// ending may have no frame left: its stack is "".
func goroutineStacks(profile []byte) map[string]int {
	out := map[string]int{}
	n := 0
	var frames []string
	flush := func() {
		if n > 0 {
			out[strings.Join(frames, "\n")] += n
		}
		n, frames = 0, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(profile))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if count, _, ok := strings.Cut(line, " @ "); ok {
			flush()
			n, _ = strconv.Atoi(count)
			continue
		}
		f := strings.Fields(strings.TrimPrefix(line, "#"))
		if n == 0 || len(f) != 3 || !strings.HasPrefix(f[0], "0x") {
			continue // the header, a blank line, pprof labels
		}
		fn, _, _ := strings.Cut(f[1], "+0x")
		frames = append(frames, "\t"+fn+" "+f[2])
	}
	flush()
	return out
}

// settle waits, polling, until ebb's counts are at most base's plus
// slack, and returns the reading. Past soakSettleTimeout it fails the
// test with the counts, the goroutines and descriptors that were not in
// the baseline, and the full goroutine dump.
func (p *soakProbe) settle(base soakReading, slack soakCounts) soakReading {
	p.t.Helper()
	limit := soakCounts{goroutines: base.goroutines + slack.goroutines, fds: base.fds + slack.fds}
	tick := time.NewTicker(soakPoll)
	defer tick.Stop()
	deadline := time.NewTimer(soakSettleTimeout)
	defer deadline.Stop()
	for {
		r := p.read()
		if r.goroutines <= limit.goroutines && r.fds <= limit.fds {
			return r
		}
		select {
		case <-tick.C:
			continue
		case <-deadline.C:
		}
		p.t.Fatalf("%s after the soak did not return to the baseline's %s (+ slack %d goroutines, %d fds) within %s\n%s",
			r.soakCounts, base.soakCounts, slack.goroutines, slack.fds, soakSettleTimeout, p.explain(base, r, true))
		return r
	}
}

// explain says what ebb holds in r that base did not: goroutines by
// stack, descriptors by target (sockets with their addresses), then, with
// dump, the full goroutine dump.
func (p *soakProbe) explain(base, r soakReading, dump bool) string {
	var b strings.Builder
	b.WriteString("goroutines not in the baseline, by stack:\n")
	for _, k := range slices.Sorted(maps.Keys(r.stacks)) {
		if d := r.stacks[k] - base.stacks[k]; d > 0 {
			fmt.Fprintf(&b, "+%d\n%s\n", d, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(base.stacks)) {
		if d := base.stacks[k] - r.stacks[k]; d > 0 {
			fmt.Fprintf(&b, "-%d (in the baseline, not now)\n%s\n", d, k)
		}
	}
	socks := procSockets(p.e.pid())
	b.WriteString("descriptors not in the baseline:\n")
	for _, fd := range slices.SortedFunc(maps.Keys(r.fdTargets), func(x, y string) int {
		i, _ := strconv.Atoi(x)
		j, _ := strconv.Atoi(y)
		return i - j
	}) {
		target := r.fdTargets[fd]
		if base.fdTargets[fd] == target {
			continue
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			if s, ok := socks[strings.TrimSuffix(inode, "]")]; ok {
				target += " " + s
			}
		}
		fmt.Fprintf(&b, "  %s -> %s\n", fd, target)
	}
	if !dump {
		return b.String()
	}
	full, err := p.get("/debug/pprof/goroutine?debug=2")
	if err != nil {
		fmt.Fprintf(&b, "goroutine dump: %v\n", err)
		return b.String()
	}
	const most = 256 << 10
	if len(full) > most {
		full = append(full[:most:most], "\n... (cut)"...)
	}
	fmt.Fprintf(&b, "goroutine dump (debug=2):\n%s", full)
	return b.String()
}

// tcpStates names the states of /proc/net/tcp (include/net/tcp_states.h).
var tcpStates = map[string]string{
	"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
	"06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING",
}

// procSockets reads the IPv4 TCP sockets of pid's network namespace as
// "local -> remote STATE" by inode.
func procSockets(pid int) map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return out
	}
	addr := func(hex string) string {
		ip, port, ok := strings.Cut(hex, ":")
		v, err1 := strconv.ParseUint(ip, 16, 32)
		n, err2 := strconv.ParseUint(port, 16, 16)
		if !ok || err1 != nil || err2 != nil {
			return hex
		}
		// The address is in the kernel's (little-endian) byte order.
		return fmt.Sprintf("%d.%d.%d.%d:%d", byte(v), byte(v>>8), byte(v>>16), byte(v>>24), n)
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		out[f[9]] = fmt.Sprintf("%s -> %s %s", addr(f[1]), addr(f[2]), tcpStates[f[3]])
	}
	return out
}
