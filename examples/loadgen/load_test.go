package loadgen

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/examples/echo"
)

// TestLoad sends every kind of client, keep-alive workers and arrivals,
// to examples/origin's application, and checks that every
// request was answered, counted by kind, and that the report says so.
func TestLoad(t *testing.T) {
	greeter := echo.Handler("test")
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Replica", "A")
		greeter.ServeHTTP(w, r)
	}))
	origin.Config.Protocols = new(http.Protocols)
	origin.Config.Protocols.SetHTTP1(true)
	origin.Config.Protocols.SetUnencryptedHTTP2(true)
	origin.Start()
	defer origin.Close()
	addr := origin.Listener.Addr().String()

	echo := Echo()
	l, err := Start(Spec{WarmOK: 60, WarmReplicas: []string{"A"}, Groups: []Group{
		{Kind: GoHTTP1, Addr: addr, Workers: 2, Arrivals: 1, Session: 2, Request: Greeting},
		{Kind: StrictHTTP1, Addr: addr, Workers: 2, Arrivals: 1, Session: 2, Request: echo},
		{Kind: GoHTTP2, Addr: addr, Workers: 2, Request: echo},
		{Kind: Go("new connections", GoConfig{NoKeepAlive: true}), Addr: addr, Workers: 1, Request: Greeting},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	await(t, l.Warm(), "the load to warm up")
	l.Stop()

	res := l.Results()
	if len(res.Fails) != 0 {
		t.Fatalf("%d failures, the first: %v", len(res.Fails), res.Fails[0].Err)
	}
	if res.OK != res.Requests || res.Requests < 60 || res.Arrivals < 2 {
		t.Errorf("%d requests, %d answered, %d arrivals", res.Requests, res.OK, res.Arrivals)
	}
	for kind, method := range map[string]string{"go-http1": http.MethodGet, "strict-http1": http.MethodPost,
		"go-http2": http.MethodPost, "new connections": http.MethodGet} {
		if res.ByKind[kind][method] == 0 {
			t.Errorf("%s sent no %s: %v", kind, method, res.ByKind)
		}
	}
	if l.ServedSince("A", l.Began()) != res.OK {
		t.Errorf("replica A served %d since the start, want %d", l.ServedSince("A", l.Began()), res.OK)
	}
	errs, lines := l.Report()
	if errs != 0 || len(lines) != 4 || !strings.HasPrefix(lines[1], "strict-http1: ") || !strings.HasSuffix(lines[1], " 0 errors") {
		t.Errorf("report: %d errors, lines %q", errs, lines)
	}
}

// TestLoadChecks checks that a wrong answer is a failure, named by kind,
// method and path.
func TestLoadChecks(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "not the greeting\n")
	}))
	defer origin.Close()
	l, err := Start(Spec{Groups: []Group{{Kind: StrictHTTP1, Addr: origin.Listener.Addr().String(), Workers: 1,
		Request: func(w, i int, _ bool) Request {
			if i == 0 {
				return Request{Method: http.MethodGet, Path: "/", Want: "not the greeting\n"}
			}
			return Greeting(w, i, false)
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	await(t, l.Warm(), "the first request, answered as expected")
	await(t, l.Watch(l.Began(), 2), "two more requests")
	l.Stop()
	res := l.Results()
	if len(res.Fails) == 0 {
		t.Fatal("no failure for answers other than the greeting")
	}
	f := res.Fails[0]
	want := `GET /?w=0&i=1: 200 "not the greeting\n", want 200 starting "hello from "`
	if f.Kind != "strict-http1" || f.Method != http.MethodGet || f.Path != "/?w=0&i=1" || f.Err.Error() != want {
		t.Errorf("first failure %+v, error %q; want %q", f, f.Err, want)
	}
}

// await waits for ch to be closed, at most 10s.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	select {
	case <-ch:
	case <-timeout.C:
		t.Fatalf("timed out waiting for %s", what)
	}
}
