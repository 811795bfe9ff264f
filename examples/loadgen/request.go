package loadgen

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
)

// Request is one request of a load, with the answer expected.
type Request struct {
	Method      string
	Path        string
	Body        string // POST only
	ContentType string // of the body
	// ID, when set, is sent as X-Request-Id, and the answer must echo it.
	ID   string
	Want string // the response body expected
	// WantPrefix: Want is only the start of the body expected (the
	// origin's greeting names the host that served it).
	WantPrefix bool
	// Last: the client sends Connection: close and leaves after this
	// request.
	Last bool
}

// check checks resp, whose body was got, against r: a status other than
// 200, a protocol version other than wantMajor, a body other than the
// expected one or a missing echo of the request's id is an error.
func check(r Request, wantMajor int, resp *http.Response, got string) error {
	if resp.ProtoMajor != wantMajor {
		return fmt.Errorf("%s %s: answered over HTTP/%d, want HTTP/%d", r.Method, r.Path, resp.ProtoMajor, wantMajor)
	}
	matches := got == r.Want || (r.WantPrefix && strings.HasPrefix(got, r.Want))
	if resp.StatusCode != http.StatusOK || !matches {
		replica := ""
		if x := resp.Header.Get("X-Replica"); x != "" {
			replica = fmt.Sprintf(" (X-Replica %q)", x)
		}
		want := quoteBody(r.Want)
		if r.WantPrefix {
			want = "starting " + want
		}
		return fmt.Errorf("%s %s: %d%s %s, want 200 %s", r.Method, r.Path, resp.StatusCode, replica, quoteBody(got), want)
	}
	if g := resp.Header.Get("X-Request-Id"); r.ID != "" && g != r.ID {
		return fmt.Errorf("%s %s: X-Request-Id %q, want %q", r.Method, r.Path, g, r.ID)
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

// The requests examples/origin answers.

// Greeting is request i of worker w: a GET of examples/origin's greeting.
func Greeting(w, i int, _ bool) Request {
	return Request{Method: http.MethodGet, Path: fmt.Sprintf("/?w=%d&i=%d", w, i), Want: "hello from ", WantPrefix: true}
}

// Echo returns the requests of POSTs to examples/origin's /echo, bodies
// of 1, 7 and 20 KiB in turn, each to come back whole.
func Echo() func(w, i int, last bool) Request {
	rng := rand.New(rand.NewPCG(1, 2))
	var bodies []string
	for _, n := range []int{1 << 10, 7 << 10, 20 << 10} {
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a' + byte(rng.IntN(26))
		}
		bodies = append(bodies, string(b))
	}
	return func(w, i int, _ bool) Request {
		body := bodies[(w+i)%len(bodies)]
		return Request{Method: http.MethodPost, Path: fmt.Sprintf("/echo?w=%d&i=%d", w, i), Body: body,
			ContentType: "application/octet-stream", Want: body}
	}
}
