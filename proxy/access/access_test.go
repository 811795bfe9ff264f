package access

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Every sink's goroutine has ended when the tests have.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bufferOut collects what a sink writes.
type bufferOut struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *bufferOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *bufferOut) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

var start = time.Date(2026, 12, 4, 22, 51, 22, 123456789, time.FixedZone("CET", 3600))

// sample fills an entry with every field, some with bytes that need
// escaping.
func sample(e *Entry) {
	e.Listener, e.Cluster, e.Upstream, e.Protocol = "public", "app", "127.0.0.1:9000", "HTTP/1.1"
	e.Status, e.Attempts, e.RequestBytes, e.ResponseBytes, e.Draining = 200, 2, 17, 1234, true
	e.Error = ""
	e.Set(Client, []byte("192.0.2.7"))
	e.Set(Method, []byte("GET"))
	e.Set(Authority, []byte("a.test"))
	e.Set(Path, []byte("/q?a=\"b\"&c=\x01\xff"))
	e.SetString(RequestID, "7f3c-id")
	e.SetString(TraceID, "4bf92f3577b34da6a3ce929d0e0e4736")
	e.Set(UserAgent, []byte("curl/8.0 (x=y)"))
}

// lines runs one entry through a sink in format f and returns the output.
func line(t *testing.T, f Format, fill func(*Entry)) string {
	t.Helper()
	var out bufferOut
	s, err := OpenSink("", &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := New(f, s).Begin(start)
	fill(e)
	e.End(start.Add(1500 * time.Microsecond))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestJSON(t *testing.T) {
	got := line(t, FormatJSON, sample)
	if !strings.HasSuffix(got, "}\n") || strings.Count(got, "\n") != 1 {
		t.Fatalf("not one line: %q", got)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	want := map[string]any{
		"time": "2026-12-04T21:51:22.123Z", "listener": "public", "protocol": "HTTP/1.1",
		"client": "192.0.2.7", "method": "GET", "authority": "a.test",
		"path": "/q?a=\"b\"&c=\x01\ufffd", "status": 200.0, "request_bytes": 17.0,
		"response_bytes": 1234.0, "duration_ms": 1.5, "cluster": "app", "upstream": "127.0.0.1:9000",
		"attempts": 2.0, "error": "", "request_id": "7f3c-id",
		"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "draining": true,
		"user_agent": "curl/8.0 (x=y)", "referer": "",
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %#v, want %#v", k, m[k], v)
		}
	}
	if len(m) != len(want) {
		t.Errorf("%d fields, want %d: %s", len(m), len(want), got)
	}
	if !strings.HasPrefix(got, `{"time":`) {
		t.Errorf("time is not first: %s", got)
	}
}

func TestText(t *testing.T) {
	got := line(t, FormatText, sample)
	want := `time=2026-12-04T21:51:22.123Z listener=public protocol=HTTP/1.1 client=192.0.2.7 method=GET authority=a.test ` +
		`path="/q?a=\"b\"&c=\u0001\ufffd" status=200 request_bytes=17 response_bytes=1234 duration_ms=1.5 cluster=app ` +
		`upstream=127.0.0.1:9000 attempts=2 error="" request_id=7f3c-id trace_id=4bf92f3577b34da6a3ce929d0e0e4736 ` +
		`draining=true user_agent="curl/8.0 (x=y)" referer=""` + "\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestCombined(t *testing.T) {
	got := line(t, FormatCombined, sample)
	want := `192.0.2.7 - - [04/Dec/2026:22:51:22 +0100] "GET /q?a=\x22b\x22&c=\x01\xff HTTP/1.1" 200 1234 "-" "curl/8.0 (x=y)"` + "\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// What ebb answered before reading a method (none) still makes a
	// line of the format's shape.
	got = line(t, FormatCombined, func(e *Entry) { e.Protocol, e.Status = "HTTP/1.1", 400 })
	want = `- - - [04/Dec/2026:22:51:22 +0100] "  HTTP/1.1" 400 0 "-" "-"` + "\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestParseFormat(t *testing.T) {
	for _, name := range Formats {
		f, err := ParseFormat(name)
		if err != nil || f.String() != name {
			t.Errorf("ParseFormat(%q) = %v, %v", name, f, err)
		}
	}
	if _, err := ParseFormat("clf"); err == nil {
		t.Error("ParseFormat(clf) = nil error")
	}
}

// TestReopen: logrotate moves the file, SIGUSR1 reopens it; no line is
// lost or written twice.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	s, err := OpenSink(path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Write([]byte("one\n"))
	s.Flush()
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	s.Write([]byte("two\n")) // queued before the reopen: goes to the moved file, or the new one
	if err := s.Reopen(); err != nil {
		t.Fatal(err)
	}
	s.Write([]byte("three\n"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(path + ".1")
	cur, _ := os.ReadFile(path)
	if all := string(old) + string(cur); all != "one\ntwo\nthree\n" || !strings.HasPrefix(string(old), "one\n") || !strings.HasSuffix(string(cur), "three\n") {
		t.Errorf("moved file %q, new file %q", old, cur)
	}
	s.Write([]byte("late\n"))
	if s.Dropped() != 1 {
		t.Errorf("a line after Close: dropped %d, want 1", s.Dropped())
	}
}

// TestReopenFails: a path that cannot be opened any more keeps the sink
// on the file it has.
func TestReopenFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "access.log")
	if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSink(path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Dir(path), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := s.Reopen(); err == nil {
		t.Error("Reopen into a directory that is gone: nil error")
	}
	s.Write([]byte("kept\n"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "moved", "access.log")); string(b) != "kept\n" {
		t.Errorf("the old file holds %q", b)
	}
}

func TestOpenSinkError(t *testing.T) {
	_, err := OpenSink(filepath.Join(t.TempDir(), "no", "such", "dir.log"), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "access log:") {
		t.Errorf("err = %v", err)
	}
}

// blockedOut is an output that blocks until released, like a full pipe.
type blockedOut struct {
	release chan struct{}
	bufferOut
}

func (o *blockedOut) Write(p []byte) (int, error) {
	<-o.release
	return o.bufferOut.Write(p)
}

// TestSlowOutput: an output that does not keep up never makes Write
// wait; what exceeds the queue is dropped and counted, the rest written.
func TestSlowOutput(t *testing.T) {
	out := &blockedOut{release: make(chan struct{})}
	s, err := OpenSink("", out, nil)
	if err != nil {
		t.Fatal(err)
	}
	line := bytes.Repeat([]byte("x"), 1023)
	line = append(line, '\n')
	const n = 3 * maxPending / 1024 // three times what the queue holds
	for range n {
		s.Write(line) // would hang here if Write waited for the output
	}
	close(out.release)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	written := uint64(strings.Count(out.String(), "\n"))
	if s.Dropped() == 0 || written+s.Dropped() != n {
		t.Errorf("written %d + dropped %d, want %d with some dropped", written, s.Dropped(), n)
	}
}

type failingOut struct{}

func (failingOut) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteError(t *testing.T) {
	var reported []error
	s, err := OpenSink("", failingOut{}, func(err error) { reported = append(reported, err) })
	if err != nil {
		t.Fatal(err)
	}
	s.Write([]byte("a\nb\n"))
	s.Flush()
	s.Write([]byte("c\n"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Dropped() != 3 || len(reported) != 1 || reported[0].Error() != "disk full" {
		t.Errorf("dropped %d, reported %v; want 3 and one report", s.Dropped(), reported)
	}
}

// BenchmarkEntry is the request path's share: fill, encode, queue.
func BenchmarkEntry(b *testing.B) {
	for _, f := range []Format{FormatJSON, FormatText, FormatCombined} {
		b.Run(f.String(), func(b *testing.B) {
			s, err := OpenSink(os.DevNull, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			l := New(f, s)
			b.ReportAllocs()
			for b.Loop() {
				e := l.Begin(start)
				sample(e)
				e.End(start.Add(time.Millisecond))
			}
		})
	}
}
