// Package grpcecho is a gRPC echo service written by hand, without
// protoc: its messages are byte slices, carried as they are by Codec. The
// e2e tests call it through ebb, and bench/grpc-bench measures ebb with
// it. Both ends speak plaintext HTTP/2 (h2c, prior knowledge) unless
// given other credentials.
package grpcecho

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Service is the service's name; Unary and Echo are its methods' full
// names, as a client calls them.
const (
	Service = "ebb.Echo"
	Unary   = "/" + Service + "/Unary"
	Echo    = "/" + Service + "/Echo"
)

// Desc describes the service:
//
//	Unary  unary:  answers the request.
//	Echo   bidi:   sends back each message as it arrives.
var Desc = grpc.ServiceDesc{
	ServiceName: Service,
	// The handlers need no server: any will do.
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var req []byte
			if err := dec(&req); err != nil {
				return nil, err
			}
			return req, nil
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Echo",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			for {
				var m []byte
				err := stream.RecvMsg(&m)
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				if err := stream.SendMsg(m); err != nil {
					return err
				}
			}
		},
	}},
}

// NewServer returns a gRPC server with the options opts, speaking Codec,
// the echo service registered: more services may be.
func NewServer(opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(append(opts, grpc.ForceServerCodec(Codec{}))...)
	s.RegisterService(&Desc, struct{}{})
	return s
}

// NewClient returns a client of target (host:port) with creds (insecure
// ones speak h2c with prior knowledge, TLS ones ALPN h2), speaking Codec,
// its calls with the options opts.
func NewClient(target string, creds credentials.TransportCredentials, opts ...grpc.CallOption) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+target,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(append(opts, grpc.ForceCodec(Codec{}))...))
}

// Codec is a gRPC codec whose messages are []byte (marshalled from
// []byte or *[]byte, unmarshalled into *[]byte) taken as they are.
type Codec struct{}

// Name is the codec's name, the subtype of the calls' content type
// (application/grpc+raw).
func (Codec) Name() string { return "raw" }

// Marshal returns the message's bytes.
func (Codec) Marshal(v any) ([]byte, error) {
	switch m := v.(type) {
	case []byte:
		return m, nil
	case *[]byte:
		return *m, nil
	}
	return nil, fmt.Errorf("grpcecho: cannot marshal a %T", v)
}

// Unmarshal sets *v to data.
func (Codec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("grpcecho: cannot unmarshal into a %T", v)
	}
	// grpc-go hands a V1 codec a fresh copy of the message (codec.go,
	// codecV0Bridge.Unmarshal materializes it): no need to copy again.
	*m = data
	return nil
}
