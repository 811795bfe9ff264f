package upstream

import (
	"context"
	"errors"
	"net"
	"os"

	"github.com/valyala/fasthttp"
)

// Kind says how an upstream exchange failed, which decides the status
// ebb answers with and whether a retry is safe.
type Kind uint8

const (
	// KindConnect: no connection could be established; nothing was sent.
	KindConnect Kind = iota + 1
	// KindOverloaded: every connection allowed to the endpoint is busy.
	KindOverloaded
	// KindTimeout: the response (or a read of its body) took too long.
	KindTimeout
	// KindBroken: the connection failed after the request was (maybe)
	// sent and before a complete response header arrived.
	KindBroken
	// KindRefused: an HTTP/2 upstream refused the stream, or went away
	// before it, unprocessed, and it could not be sent again.
	KindRefused
	// KindInvalid: the upstream's response broke HTTP's rules (an
	// InvalidResponse: a field name that is no token, conflicting
	// framing, a 101 nobody asked for, ...). The upstream received the
	// request; the connection is closed.
	KindInvalid
	// NumKinds bounds the kinds, for arrays indexed by Kind.
	NumKinds
)

var kindNames = [NumKinds]string{
	KindConnect:    "connect",
	KindOverloaded: "overloaded",
	KindTimeout:    "timeout",
	KindBroken:     "broken",
	KindRefused:    "refused",
	KindInvalid:    "invalid",
}

// String returns the kind's name, as metrics and logs show it ("" for 0).
func (k Kind) String() string {
	if k < NumKinds {
		return kindNames[k]
	}
	return ""
}

// errorKinds are the kinds as the access log's error field and a client
// span's error.type name them.
var errorKinds = [NumKinds]string{
	KindConnect:    "upstream_connect",
	KindOverloaded: "upstream_busy",
	KindTimeout:    "upstream_timeout",
	KindBroken:     "upstream_broken",
	KindRefused:    "upstream_refused",
	KindInvalid:    "upstream_invalid",
}

// ErrorKind returns the kind of failure as the access log's error field
// names it (the answer ebb makes for it: upstream_busy for KindOverloaded,
// the 503 "upstream connection limit reached"), and as a client span's
// error.type does. A kind without a name is upstream_broken, the 502 ebb
// answers it with.
func (k Kind) ErrorKind() string {
	if k < NumKinds && errorKinds[k] != "" {
		return errorKinds[k]
	}
	return errorKinds[KindBroken]
}

// Error is an upstream exchange's failure with its kind.
type Error struct {
	Kind Kind
	// Unanswered: the request went out, and the connection (or stream)
	// ended before a complete response header. The upstream may still
	// have processed it; nothing of it reached the client.
	Unanswered bool
	// Reused: unanswered on a pooled connection that had carried an
	// exchange before, the classic keep-alive race (the upstream closed
	// it while idle).
	Reused bool
	// Unreceived: unanswered, and the upstream's TCP stack acknowledged
	// no byte of the request before the connection ended. The upstream
	// had closed the connection before the request reached it, so it
	// cannot have processed it.
	Unreceived bool
	Err        error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ErrResend is wrapped by the errors of ebb's HTTP/2 client for a
// request the upstream did not process (an HTTP/2 stream refused, beyond
// the upstream's GOAWAY, or on a connection that ended before it went
// out): the retry loop sends it again, whatever its method, preferably
// to another endpoint.
var ErrResend = errors.New("upstream: the upstream did not process the request")

// KindOf returns the kind of a failed exchange's error, whichever
// transport returned it.
func KindOf(err error) Kind {
	var ue *Error
	if errors.As(err, &ue) {
		return ue.Kind
	}
	kind, _ := ClassifyHTTP(err)
	return kind
}

// NotSent reports whether err says the request never reached the
// upstream.
func NotSent(err error) bool {
	var ue *Error
	if errors.As(err, &ue) {
		return ue.Kind == KindConnect || ue.Kind == KindOverloaded
	}
	if errors.Is(err, ErrResend) {
		return true
	}
	kind, client := ClassifyHTTP(err)
	return !client && kind == KindConnect
}

// Resendable reports whether a request that failed with err may be sent
// to another endpoint. idempotent says whether its method is; replayable
// whether its body (if any) can be sent again: it was buffered, or not a
// byte of it has been read. A request the upstream did not receive goes
// again whatever its method; one whose connection or stream ended before
// a response header, only if idempotent or unreceived (see SafeAgain); a
// partial response never.
func Resendable(err error, idempotent, replayable bool) bool {
	if !replayable {
		return false
	}
	var ue *Error
	if errors.As(err, &ue) && ue.Unanswered {
		return SafeAgain(ue, idempotent)
	}
	return NotSent(err)
}

// SafeAgain reports whether a request whose exchange failed with ue may be
// sent again, its body permitting: the connection ended before a response
// header, and either its method is idempotent (RFC 9110 §9.2.2) or the
// upstream never received it.
func SafeAgain(ue *Error, idempotent bool) bool {
	return ue.Unanswered && (idempotent || ue.Unreceived)
}

// IsConnectFailure reports whether err is a failed connect to the
// endpoint.
func IsConnectFailure(err error) bool {
	var ue *Error
	if errors.As(err, &ue) {
		return ue.Kind == KindConnect
	}
	kind, client := ClassifyHTTP(err)
	return !client && kind == KindConnect
}

// ClassifyHTTP maps an error of an exchange in net/http's form (ebb's
// HTTP/2 client's; net/http's dial and timeout errors) to a Kind. client reports
// that the request was ended by the client (its context was cancelled),
// which is no upstream failure.
func ClassifyHTTP(err error) (kind Kind, client bool) {
	var oe *net.OpError
	switch {
	case errors.Is(err, context.Canceled):
		return KindBroken, true
	case errors.Is(err, ErrResend):
		return KindRefused, false
	case errors.As(err, &oe) && oe.Op == "dial":
		return KindConnect, false
	case IsTimeout(err):
		return KindTimeout, false
	}
	return KindBroken, false
}

// isWriteError reports whether err is a failure to write to a connection
// (as opposed to a failure to read the body being copied to it).
func isWriteError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "write"
}

// IsTimeout reports whether err is a deadline or timeout of any layer.
func IsTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, fasthttp.ErrTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// IsIdempotent reports whether the request's method may be sent twice
// (RFC 9110 §9.2.2).
func IsIdempotent(req *fasthttp.Request) bool {
	h := &req.Header
	return h.IsGet() || h.IsHead() || h.IsOptions() || h.IsPut() || h.IsDelete() || h.IsTrace()
}

// IsIdempotentMethod is IsIdempotent for a method name.
func IsIdempotentMethod(m string) bool {
	switch m {
	case "GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE":
		return true
	}
	return false
}
