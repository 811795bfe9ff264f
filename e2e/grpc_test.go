package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ebb-proxy/ebb/examples/grpcecho"
)

// The gRPC tests run grpc-go's own client and server through ebb: the
// server serves examples/grpcecho's echo service, and testDesc for the
// rest (status and metadata, deadlines, each kind of stream, messages past
// the default size limit).

const (
	grpcService = "ebb.e2e.Test"
	grpcFail    = "/" + grpcService + "/Fail"
	grpcBlock   = "/" + grpcService + "/Block"
	// grpcBigSize is the size of the large messages, past grpc-go's
	// default 4 MiB receive limit: both ends raise it to grpcMaxMsg.
	grpcBigSize = 8 << 20
	grpcMaxMsg  = 16 << 20
)

// testDesc describes the tests' own service. Its handlers take the
// *echoServer that was registered.
//
//	Fail   unary:   sets header x-header: h (unless the request is
//	                "trailers-only") and trailer x-trailer: t, and fails
//	                with NotFound "x".
//	Block  unary:   waits for its context to end and reports to
//	                echoServer.blocked.
//	Count  server:  the request is a decimal n; sends countMessage(0..n-1).
//	Sum    client:  answers "COUNT SHA256" of the messages received.
//	Big    bidi:    receives one message; sends the hex SHA-256 of it, then
//	                grpcBigSize bytes of randBytes(8, ...).
var testDesc = grpc.ServiceDesc{
	ServiceName: grpcService,
	// The handlers assert the server's type themselves.
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		unaryMethod("Fail", (*echoServer).fail),
		unaryMethod("Block", (*echoServer).block),
	},
	Streams: []grpc.StreamDesc{
		streamMethod("Count", true, false, (*echoServer).count),
		streamMethod("Sum", false, true, (*echoServer).sum),
		streamMethod("Big", true, true, (*echoServer).big),
	},
}

func unaryMethod(name string, f func(*echoServer, context.Context, []byte) ([]byte, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var req []byte
			if err := dec(&req); err != nil {
				return nil, err
			}
			return f(srv.(*echoServer), ctx, req)
		},
	}
}

func streamMethod(name string, serverStreams, clientStreams bool, f func(*echoServer, grpc.ServerStream) error) grpc.StreamDesc {
	return grpc.StreamDesc{
		StreamName:    name,
		ServerStreams: serverStreams,
		ClientStreams: clientStreams,
		Handler: func(srv any, stream grpc.ServerStream) error {
			return f(srv.(*echoServer), stream)
		},
	}
}

// echoServer serves grpcecho's service and implements testDesc.
type echoServer struct {
	addr string // host:port it listens on

	// blocked receives one report per Block call, once its context ended.
	blocked chan blockReport
}

// blockReport is what a Block handler saw.
type blockReport struct {
	deadline    time.Duration // left on its context when it started
	hasDeadline bool          // whether its context had a deadline at all
	err         error         // its context's error once done
}

// startEchoServer serves grpcecho's service and testDesc with plain-text
// HTTP/2 (h2c) on 127.0.0.1:0 until the test ends.
func startEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{addr: ln.Addr().String(), blocked: make(chan blockReport, 1)}
	gs := grpcecho.NewServer(
		grpc.Creds(insecure.NewCredentials()),
		grpc.MaxRecvMsgSize(grpcMaxMsg),
		grpc.MaxSendMsgSize(grpcMaxMsg),
	)
	gs.RegisterService(&testDesc, s)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	t.Cleanup(func() {
		// Stop, not GracefulStop: a handler stuck because ebb lost a
		// cancellation must not hang the test; Stop ends its context.
		gs.Stop()
		if err := <-served; err != nil {
			t.Errorf("gRPC server: %v", err)
		}
	})
	return s
}

func (s *echoServer) fail(ctx context.Context, req []byte) ([]byte, error) {
	if string(req) != "trailers-only" {
		if err := grpc.SetHeader(ctx, metadata.Pairs("x-header", "h")); err != nil {
			return nil, err
		}
	}
	if err := grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t")); err != nil {
		return nil, err
	}
	return nil, status.Error(codes.NotFound, "x")
}

func (s *echoServer) block(ctx context.Context, _ []byte) ([]byte, error) {
	var r blockReport
	if d, ok := ctx.Deadline(); ok {
		r.hasDeadline, r.deadline = true, time.Until(d)
	}
	<-ctx.Done()
	r.err = ctx.Err()
	s.blocked <- r
	return nil, status.FromContextError(ctx.Err()).Err()
}

func (s *echoServer) count(stream grpc.ServerStream) error {
	req, err := recvBytes(stream)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(string(req))
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "count %q: %v", req, err)
	}
	for i := range n {
		if err := stream.SendMsg(countMessage(i)); err != nil {
			return err
		}
	}
	return nil
}

func (s *echoServer) sum(stream grpc.ServerStream) error {
	h := sha256.New()
	n := 0
	for {
		m, err := recvBytes(stream)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		h.Write(m)
		n++
	}
	return stream.SendMsg(fmt.Appendf(nil, "%d %x", n, h.Sum(nil)))
}

func (s *echoServer) big(stream grpc.ServerStream) error {
	m, err := recvBytes(stream)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(m)
	if err := stream.SendMsg([]byte(hex.EncodeToString(sum[:]))); err != nil {
		return err
	}
	return stream.SendMsg(randBytes(8, grpcBigSize))
}

// countMessage is the i-th message Count sends: 1 KiB, starting with i.
func countMessage(i int) []byte {
	m := bytes.Repeat([]byte{'.'}, 1<<10)
	copy(m, strconv.Itoa(i)+":")
	return m
}

// recvBytes receives one message from a client or server stream.
func recvBytes(s interface{ RecvMsg(any) error }) ([]byte, error) {
	var m []byte
	err := s.RecvMsg(&m)
	return m, err
}

// openStream opens a stream of the named method of grpcecho's service or
// testDesc.
func openStream(t *testing.T, ctx context.Context, conn *grpc.ClientConn, name string) grpc.ClientStream {
	t.Helper()
	for _, sd := range []*grpc.ServiceDesc{&grpcecho.Desc, &testDesc} {
		for i := range sd.Streams {
			if d := &sd.Streams[i]; d.StreamName == name {
				s, err := conn.NewStream(ctx, d, "/"+sd.ServiceName+"/"+name)
				if err != nil {
					t.Fatalf("opening %s: %v", name, err)
				}
				return s
			}
		}
	}
	t.Fatalf("no stream method %s", name)
	return nil
}

// invoke calls the unary method, its full name.
func invoke(ctx context.Context, conn *grpc.ClientConn, method string, req []byte, opts ...grpc.CallOption) ([]byte, error) {
	var resp []byte
	err := conn.Invoke(ctx, method, req, &resp, opts...)
	return resp, err
}

// dialGRPC connects a gRPC client to addr with creds: insecure ones speak
// h2c with prior knowledge, TLS ones ALPN h2. Closed at cleanup.
func dialGRPC(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpcecho.NewClient(addr, creds, grpc.MaxCallRecvMsgSize(grpcMaxMsg), grpc.MaxCallSendMsgSize(grpcMaxMsg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// grpcScenarios are the calls every mode of TestGRPC makes.
var grpcScenarios = []struct {
	name string
	run  func(t *testing.T, ctx context.Context, conn *grpc.ClientConn, srv *echoServer)
}{
	{"unary", func(t *testing.T, ctx context.Context, conn *grpc.ClientConn, _ *echoServer) {
		resp, err := invoke(ctx, conn, grpcecho.Unary, []byte("ping"))
		if err != nil {
			t.Fatalf("Unary: %v", err)
		}
		if string(resp) != "ping" {
			t.Fatalf("Unary answered %q, want %q", resp, "ping")
		}
	}},
	{"server streaming", func(t *testing.T, ctx context.Context, conn *grpc.ClientConn, _ *echoServer) {
		// 1 MiB in all: many times the 64 KiB HTTP/2 initial window.
		const n = 1000
		s := openStream(t, ctx, conn, "Count")
		if err := s.SendMsg([]byte(strconv.Itoa(n))); err != nil {
			t.Fatal(err)
		}
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			m, err := recvBytes(s)
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			if want := countMessage(i); !bytes.Equal(m, want) {
				t.Fatalf("message %d is %.20q..., want %.20q...", i, m, want)
			}
		}
		if m, err := recvBytes(s); !errors.Is(err, io.EOF) {
			t.Fatalf("after %d messages: got %.20q, %v; want io.EOF", n, m, err)
		}
	}},
	{"client streaming", func(t *testing.T, ctx context.Context, conn *grpc.ClientConn, _ *echoServer) {
		const n = 1000
		h := sha256.New()
		s := openStream(t, ctx, conn, "Sum")
		for i := range n {
			m := countMessage(i)
			h.Write(m)
			if err := s.SendMsg(m); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		got, err := recvBytes(s)
		if err != nil {
			t.Fatalf("Sum: %v", err)
		}
		if want := fmt.Sprintf("%d %x", n, h.Sum(nil)); string(got) != want {
			t.Fatalf("Sum answered %q, want %q", got, want)
		}
		if m, err := recvBytes(s); !errors.Is(err, io.EOF) {
			t.Fatalf("after the answer: got %q, %v; want io.EOF", m, err)
		}
	}},
	{"bidirectional interleaved", func(t *testing.T, ctx context.Context, conn *grpc.ClientConn, _ *echoServer) {
		// Each answer arrives while the request stream is still open:
		// ebb forwards both directions at once.
		s := openStream(t, ctx, conn, "Echo")
		for i := range 100 {
			m := []byte("message " + strconv.Itoa(i))
			if err := s.SendMsg(m); err != nil {
				t.Fatalf("sending %d: %v", i, err)
			}
			got, err := recvBytes(s)
			if err != nil {
				t.Fatalf("receiving %d: %v", i, err)
			}
			if !bytes.Equal(got, m) {
				t.Fatalf("echo of %q is %q", m, got)
			}
		}
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if m, err := recvBytes(s); !errors.Is(err, io.EOF) {
			t.Fatalf("after CloseSend: got %q, %v; want io.EOF", m, err)
		}
	}},
	{"deadline", func(t *testing.T, ctx context.Context, conn *grpc.ClientConn, srv *echoServer) {
		// A connection first, so that the deadline is spent on the call.
		if _, err := invoke(ctx, conn, grpcecho.Unary, nil); err != nil {
			t.Fatalf("Unary: %v", err)
		}
		const timeout = time.Second
		callCtx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := invoke(callCtx, conn, grpcBlock, nil)
		if code := status.Code(err); code != codes.DeadlineExceeded {
			t.Fatalf("Block: %v (code %s), want code DeadlineExceeded", err, code)
		}
		r := recv(t, srv.blocked, "the Block handler's context to end")
		if !r.hasDeadline {
			t.Fatal("the Block handler's context had no deadline: grpc-timeout did not reach the server")
		}
		if r.deadline <= 0 || r.deadline > timeout {
			t.Errorf("the Block handler started with %s left, want within (0, %s]", r.deadline, timeout)
		}
		if r.err == nil {
			t.Error("the Block handler's context ended without an error")
		}
	}},
	{"status with headers and trailers", func(t *testing.T, ctx context.Context, conn *grpc.ClientConn, _ *echoServer) {
		var header, trailer metadata.MD
		_, err := invoke(ctx, conn, grpcFail, []byte("headers"), grpc.Header(&header), grpc.Trailer(&trailer))
		checkStatus(t, err, codes.NotFound, "x")
		checkMD(t, "header", header, "x-header", "h")
		checkMD(t, "trailer", trailer, "x-trailer", "t")
	}},
	{"status trailers-only", func(t *testing.T, ctx context.Context, conn *grpc.ClientConn, _ *echoServer) {
		// No header set: the server answers with one HEADERS frame,
		// END_STREAM set, holding the status (a Trailers-Only response).
		var header, trailer metadata.MD
		_, err := invoke(ctx, conn, grpcFail, []byte("trailers-only"), grpc.Header(&header), grpc.Trailer(&trailer))
		checkStatus(t, err, codes.NotFound, "x")
		checkMD(t, "trailer", trailer, "x-trailer", "t")
		if v := header.Get("x-header"); len(v) != 0 {
			t.Errorf("header x-header = %q, want none", v)
		}
	}},
	{"8 MiB each way", func(t *testing.T, ctx context.Context, conn *grpc.ClientConn, _ *echoServer) {
		s := openStream(t, ctx, conn, "Big")
		if err := s.SendMsg(randBytes(7, grpcBigSize)); err != nil {
			t.Fatalf("sending: %v", err)
		}
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		got, err := recvBytes(s)
		if err != nil {
			t.Fatalf("receiving the hash: %v", err)
		}
		if want := streamSHA256(7, grpcBigSize); string(got) != want {
			t.Fatalf("the server received SHA-256 %s, want %s", got, want)
		}
		big, err := recvBytes(s)
		if err != nil {
			t.Fatalf("receiving the large message: %v", err)
		}
		sum := sha256.Sum256(big)
		if got, want := hex.EncodeToString(sum[:]), streamSHA256(8, grpcBigSize); len(big) != grpcBigSize || got != want {
			t.Fatalf("received %d bytes with SHA-256 %s, want %d with %s", len(big), got, grpcBigSize, want)
		}
		if m, err := recvBytes(s); !errors.Is(err, io.EOF) {
			t.Fatalf("after the large message: got %d bytes, %v; want io.EOF", len(m), err)
		}
	}},
}

func checkStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %v is not a gRPC status", err)
	}
	if st.Code() != code || st.Message() != msg {
		t.Fatalf("status %s %q, want %s %q", st.Code(), st.Message(), code, msg)
	}
}

func checkMD(t *testing.T, what string, md metadata.MD, key, value string) {
	t.Helper()
	if v := md.Get(key); len(v) != 1 || v[0] != value {
		t.Errorf("%s %s = %q, want [%q]", what, key, v, value)
	}
}

// TestGRPC makes every kind of gRPC call through ebb, to a cluster of
// protocol h2c: from a client speaking h2c with prior knowledge, and from
// one speaking TLS (ALPN h2) to a TLS listener.
func TestGRPC(t *testing.T) {
	t.Parallel()
	modes := []struct {
		name string
		tls  bool
	}{
		{"h2c", false},
		{"tls", true},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			srv := startEchoServer(t)
			var listener []string
			creds := insecure.NewCredentials()
			if mode.tls {
				cert, key, pool := writeTestCert(t, t.TempDir())
				listener = []string{fmt.Sprintf("tls: { cert: %q, key: %q }", cert, key)}
				creds = credentials.NewTLS(&tls.Config{RootCAs: pool})
			}
			e := startEbb(t, oneClusterYAML(srv.addr, listener, []string{"protocol: h2c"}))
			conn := dialGRPC(t, e.addr("public"), creds)
			for _, sc := range grpcScenarios {
				t.Run(sc.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
					defer cancel()
					sc.run(t, ctx, conn, srv)
					if t.Failed() {
						t.Logf("ebb's log:\n%s", e.logs())
					}
				})
			}
		})
	}
}
