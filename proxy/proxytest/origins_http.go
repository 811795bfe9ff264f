package proxytest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// ExchangeOrigin answers:
//
//	GET  /hello  200 "hello, world\n" with Content-Length (HEAD: no body)
//	POST /echo   201, the body, with the request's Content-Type and
//	             X-Request-Length: the Content-Length the origin saw
//	GET  /empty  204, with X-Request-Length as for POST /echo
//	GET  /teapot 418 "short and stout\n"
//	GET  /uri/…  200, the request URI exactly as received
func ExchangeOrigin() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /teapot", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, "short and stout\n")
	})
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "13")
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello, world\n")
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "origin: reading the body: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.Header().Set("X-Request-Length", strconv.FormatInt(r.ContentLength, 10))
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	})
	mux.HandleFunc("GET /empty", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Length", strconv.FormatInt(r.ContentLength, 10))
		w.WriteHeader(http.StatusNoContent)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Before the mux, which would clean the path (and redirect).
		if strings.HasPrefix(r.RequestURI, "/uri/") {
			io.WriteString(w, r.RequestURI)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// BigSize is the size of the large bodies: twice the largest flow
// control window on the way (Go's 4 MiB per HTTP/2 stream), a hundred
// times ebb's 64 KiB buffering threshold. Every byte costs under the race
// detector, and the scenario runs in 16 modes.
const BigSize = 8 << 20

// BigBody is the large body, made once: generating it for every mode
// costs more than moving it under the race detector.
var BigBody = sync.OnceValues(func() ([]byte, string) {
	b := RandBytes(11, BigSize)
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
})

// Sink reads a request body whole and answers "LEN N SHA": the
// Content-Length the origin saw (-1: none), the bytes it read and their
// SHA-256, for the large-body tests to compare with what they sent.
func Sink(w http.ResponseWriter, r *http.Request) {
	h := sha256.New()
	n, err := io.Copy(h, r.Body)
	if err != nil {
		http.Error(w, "origin: reading the body: "+err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintf(w, "%d %d %x", r.ContentLength, n, h.Sum(nil))
}
