// Package e2e holds ebb's end-to-end tests. They build the real ebb binary
// once (TestMain), run it as a separate process with a configuration file
// written for each test, and drive it from outside with real peers: origin
// servers built on net/http in the test process, Go's HTTP client, curl,
// raw TCP connections and a gorilla/websocket client and server.
//
// Every test stops the ebb processes it started with SIGTERM and checks
// that they drained cleanly (exit status 0) and logged no error.
//
// Run them with
//
//	go test -race -count=1 ./e2e/
//
// curl must be installed (e2e/deps.sh installs it).
package e2e
