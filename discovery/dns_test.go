package discovery

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// dnsServer is a real DNS server on 127.0.0.1 whose answers the test sets.
type dnsServer struct {
	mu      sync.Mutex
	a       []string   // A records of app.test.
	srv     []*dns.SRV // SRV records of _http._tcp.app.test.
	fail    bool       // answer SERVFAIL
	queries chan struct{}
}

func startDNS(t *testing.T) (*dnsServer, string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{queries: make(chan struct{}, 64)}
	started := make(chan struct{})
	server := &dns.Server{PacketConn: pc, Handler: s, NotifyStartedFunc: func() { close(started) }}
	done := make(chan struct{})
	go func() { defer close(done); server.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { server.Shutdown(); <-done })
	return s, pc.LocalAddr().String()
}

func (s *dnsServer) set(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn()
}

func (s *dnsServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		select {
		case s.queries <- struct{}{}:
		default:
		}
	}()
	m := new(dns.Msg)
	m.SetReply(r)
	if s.fail {
		m.Rcode = dns.RcodeServerFailure
		w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	switch {
	case q.Qtype == dns.TypeA && q.Name == "app.test.":
		for _, ip := range s.a {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: net.ParseIP(ip)})
		}
	case q.Qtype == dns.TypeSRV && q.Name == "_http._tcp.app.test.":
		for _, rr := range s.srv {
			rr.Hdr = dns.RR_Header{Name: q.Name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 1}
			m.Answer = append(m.Answer, rr)
		}
	}
	w.WriteMsg(m)
}

func TestDNSSourceA(t *testing.T) {
	srv, addr := startDNS(t)
	srv.set(func() { srv.a = []string{"10.0.0.2", "10.0.0.1"} })
	src := NewDNS("app.test", 8080, 20*time.Millisecond, addr, slog.New(slog.NewTextHandler(io.Discard, nil)))
	set, err := src.Load()
	if err != nil || !slices.Equal(set.Addresses(), []string{"10.0.0.1:8080", "10.0.0.2:8080"}) {
		t.Fatalf("Load = %v, %v", set.Addresses(), err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	sets := make(chan Set, 16)
	done := make(chan error)
	go func() { done <- src.Run(ctx, func(s Set) { sets <- s }) }()
	defer func() { cancel(); <-done }()
	if got := next(t, sets); !slices.Equal(got, []string{"10.0.0.1:8080", "10.0.0.2:8080"}) {
		t.Fatalf("first set %v", got)
	}
	// Failing lookups keep the last good set: several refreshes pass
	// without an update, then a good answer with new records comes through.
	srv.set(func() { srv.fail = true })
	drainQueries(srv)
	for range 3 {
		<-srv.queries
	}
	select {
	case s := <-sets:
		t.Fatalf("a failed lookup delivered %v", s.Addresses())
	default:
	}
	srv.set(func() { srv.fail = false; srv.a = []string{"10.0.0.3"} })
	if got := next(t, sets); !slices.Equal(got, []string{"10.0.0.3:8080"}) {
		t.Fatalf("after recovery %v", got)
	}
}

func TestDNSSourceSRV(t *testing.T) {
	srv, addr := startDNS(t)
	srv.set(func() {
		srv.srv = []*dns.SRV{{Target: "b.app.test.", Port: 9001}, {Target: "a.app.test.", Port: 9000}}
	})
	set, err := NewDNS("_http._tcp.app.test", 0, time.Second, addr, nil).Load()
	if err != nil || !slices.Equal(set.Addresses(), []string{"a.app.test:9000", "b.app.test:9001"}) {
		t.Fatalf("Load = %v, %v", set.Addresses(), err)
	}
}

func TestDNSSourceNoRecords(t *testing.T) {
	_, addr := startDNS(t)
	if _, err := NewDNS("app.test", 80, time.Second, addr, nil).Load(); err == nil {
		t.Fatal("no error for a name without records")
	}
}

func drainQueries(s *dnsServer) {
	for {
		select {
		case <-s.queries:
		default:
			return
		}
	}
}
