// Package echo is the origin the examples put behind ebb, and what the
// tests and demos share of it: the HTTP application of examples/origin
// (Handler), and an echo of WebSocket messages (WebSockets).
package echo

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Handler answers, naming itself name:
//
//	GET  /            a greeting naming the host that served it
//	POST /echo        the request body, streamed back
//	GET  /bytes?n=N   N bytes (streamed, so any size works)
//	GET  /slow?d=2s   the greeting after a delay
func Handler(name string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s (%s %s, forwarded for %s)\n", name, r.Method, r.URL.Path, r.Header.Get("X-Forwarded-For"))
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		// Without full duplex, net/http ends an HTTP/1 request body once
		// the response has begun: a body past the first write would be cut.
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			http.Error(w, "origin: "+err.Error(), http.StatusInternalServerError)
			return
		}
		io.Copy(w, r.Body)
	})
	mux.HandleFunc("GET /bytes", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "n must be a byte count", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		buf := make([]byte, 32<<10)
		for i := range buf {
			buf[i] = 'a' + byte(i%26)
		}
		for n > 0 {
			k := min(n, int64(len(buf)))
			if _, err := w.Write(buf[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("d"))
		if err != nil {
			d = time.Second
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			fmt.Fprintf(w, "hello from %s after %s\n", name, d)
		case <-r.Context().Done():
		}
	})
	return mux
}
