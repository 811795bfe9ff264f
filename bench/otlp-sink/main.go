// Command otlp-sink is the OpenTelemetry collector of bench/run.sh's
// tracing variants: an OTLP/gRPC trace receiver on the loopback interface
// that counts the spans it is sent and throws them away, so that what the
// bench measures is what tracing costs ebb, not what a collector costs the
// machine. It prints "ready" once it listens and, on SIGTERM or SIGINT,
// one line "spans=N exports=M" before it exits.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os/signal"
	"sync/atomic"
	"syscall"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// sink counts what it is exported.
type sink struct {
	coltracepb.UnimplementedTraceServiceServer
	spans, exports atomic.Int64
}

func (s *sink) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	var n int64
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			n += int64(len(ss.Spans))
		}
	}
	s.spans.Add(n)
	s.exports.Add(1)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:4317", "loopback address to receive OTLP/gRPC traces on")
	flag.Parse()
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		log.Fatalf("otlp-sink: -addr %q: %v", *addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		log.Fatalf("otlp-sink: -addr %q: expected a loopback IP address", *addr)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("otlp-sink: %v", err)
	}
	s := &sink{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, s)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Println("ready")
	select {
	case <-ctx.Done():
		srv.GracefulStop()
		<-served
	case err := <-served:
		log.Fatalf("otlp-sink: %v", err)
	}
	fmt.Printf("spans=%d exports=%d\n", s.spans.Load(), s.exports.Load())
}
