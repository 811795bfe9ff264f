// Command scenarioapp is the application of the e2e test TestDrainAppGone,
// built by the test (go build ./e2e/testdata/scenarioapp). It serves HTTP
// on -addr and talks to the test's control server at -ctl: it reports its
// pid once listening (/up), and each GET /hold waits for the control
// server's /hold to answer before answering. On SIGTERM it closes its port,
// reports /stopping, finishes the requests in flight and exits 0.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
)

func main() {
	addr := flag.String("addr", "", "address to serve HTTP on")
	ctl := flag.String("ctl", "", "base URL of the test's control server")
	flag.Parse()
	// Die with the parent (ebb, or the test), whatever happens to it.
	syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	inFlight := 0
	idle := sync.NewCond(&mu)
	mux := http.NewServeMux()
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		mu.Unlock()
		defer func() {
			mu.Lock()
			inFlight--
			idle.Broadcast()
			mu.Unlock()
		}()
		if err := ctlGet(*ctl + "/hold"); err != nil {
			http.Error(w, "app: "+err.Error(), http.StatusInternalServerError)
			return
		}
		body := "held, then answered by pid " + strconv.Itoa(os.Getpid()) + "\n"
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		io.WriteString(w, body)
		// The whole response is on the wire before the request counts as
		// finished (and the process may exit).
		w.(http.Flusher).Flush()
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "app\n")
	})
	go http.Serve(ln, mux)
	if err := ctlGet(*ctl + "/up?pid=" + strconv.Itoa(os.Getpid())); err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		os.Exit(1)
	}
	<-sigs
	ln.Close()
	ctlGet(*ctl + "/stopping")
	mu.Lock()
	for inFlight > 0 {
		idle.Wait()
	}
	mu.Unlock()
	os.Exit(0)
}

func ctlGet(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	return nil
}
