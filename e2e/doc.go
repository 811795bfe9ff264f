// Package e2e holds ebb's end-to-end tests. They build the real ebb binary
// once (TestMain), run it as a separate process with a configuration file
// written for each test, and drive it from outside with real peers: origin
// servers built on net/http (HTTP/1.1, h2c and TLS) and grpc-go in the test
// process, Go's HTTP/1.1 and HTTP/2 clients, curl, h2load, h2spec, raw TCP
// connections, raw HTTP/2 frames, gRPC clients and a gorilla/websocket
// client and server. matrix_test.go runs the proxy behaviour tests once per
// mode: HTTP/1.1 and HTTP/2 clients, cleartext and TLS, towards http1, h2c,
// h2 and auto clusters.
//
// Every test stops the ebb processes it started with SIGTERM and checks
// that they drained cleanly (exit status 0) and logged no error.
//
// Run them with
//
//	go test -race -count=1 ./e2e/
//
// curl, h2load (nghttp2-client) and h2spec must be installed; e2e/deps.sh
// installs them, and a test that misses one fails saying how to install it.
package e2e
