// Package access writes the access log: one line per request, in JSON,
// logfmt-style text or the combined log format, to standard output or a
// file. The request path fills a pooled Entry; Entry.End encodes it
// without allocating and hands the line to a Sink, which writes lines in
// batches from a goroutine of its own, so that no request waits for the
// disk.
package access

import (
	"fmt"
	"sync"
	"time"
)

// Format is how entries are written.
type Format uint8

// The formats.
const (
	// FormatJSON writes one JSON object per line.
	FormatJSON Format = iota
	// FormatText writes key=value pairs (logfmt), as ebb's text log does.
	FormatText
	// FormatCombined writes the combined log format of Apache and nginx,
	// for tools that expect it (it has no room for ebb's other fields).
	FormatCombined
)

var formatNames = [...]string{FormatJSON: "json", FormatText: "text", FormatCombined: "combined"}

// Formats are the names ParseFormat takes.
var Formats = formatNames[:]

// ParseFormat returns the format named s.
func ParseFormat(s string) (Format, error) {
	for i, n := range formatNames {
		if n == s {
			return Format(i), nil
		}
	}
	return 0, fmt.Errorf("access: unknown format %q", s)
}

func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("Format(%d)", f)
}

// Log writes entries in one format to a sink. It is immutable, so that
// a routing snapshot can hold it: a reload that changes the format
// builds another Log on the same sink.
type Log struct {
	format Format
	sink   *Sink
}

// New returns a Log writing format to sink.
func New(format Format, sink *Sink) *Log { return &Log{format: format, sink: sink} }

// Field names an entry's byte-string fields, which Set copies in (the
// request's memory is reused once its handler returns, and an entry may
// be ended later, when a streamed response body has been relayed).
type Field uint8

// The fields Set takes.
const (
	Client    Field = iota // the client's IP address
	Method                 // the request method
	Authority              // Host, or :authority
	Path                   // the request target as sent (with the query)
	RequestID              // X-Request-Id, as sent upstream
	TraceID                // the W3C trace id, hex
	UserAgent              // User-Agent
	Referer                // Referer
	numFields
)

type span struct{ start, end int32 }

// Entry is one request's access log line on its way. Its exported fields
// are set by the request path; End writes it. An Entry belongs to one
// goroutine at a time, and to nobody after End.
type Entry struct {
	log *Log
	// Start is when the request's headers had arrived.
	Start time.Time
	// Listener, Cluster ("" when no route matched) and Upstream (the
	// endpoint that answered, or was last tried; "" when none was) are
	// names from the configuration and discovery, not copied.
	Listener, Cluster, Upstream string
	// Protocol is the client's protocol version: HTTP/1.0, HTTP/1.1,
	// HTTP/2.0.
	Protocol string
	// Error is the kind of failure when ebb answered itself ("" when the
	// upstream's response was relayed): no_route, no_endpoint,
	// overloaded, cluster_busy, client_closed, bad_request, body_too_large,
	// body_timeout, bad_body, or an upstream failure (connect,
	// connect_limit, timeout, broken, refused).
	Error string
	// Status is the status sent (499 when the client left first).
	Status int
	// Attempts is how many upstream exchanges were tried (0: none).
	Attempts int
	// RequestBytes and ResponseBytes are the body bytes relayed: read
	// from the client, and written to it.
	RequestBytes, ResponseBytes int64
	// Draining: the request arrived during a drain.
	Draining bool

	// Ender, if set, is told when the entry ends, before it is written
	// (the request's server span ends then).
	Ender Ender

	// body, if set, is the request's body, counted at End (see
	// CountBody).
	body RequestBody

	fields [numFields]span
	arena  []byte // the fields' bytes
	line   []byte // the encoded line
}

var entries = sync.Pool{New: func() any { return &Entry{arena: make([]byte, 0, 512), line: make([]byte, 0, 1024)} }}

// maxPooled bounds the buffers an entry keeps in the pool: an entry that
// held a 30 KiB path goes, rather than pin that much per pooled entry.
const maxPooled = 8 << 10

// Ender is told that an entry ended at a time, with its fields final.
type Ender interface {
	Ended(e *Entry, at time.Time)
}

// Begin returns an entry for a request whose headers arrived at start.
func (l *Log) Begin(start time.Time) *Entry { return Begin(l, start) }

// Begin returns an entry for a request whose headers arrived at start,
// written to l at its end; l nil writes no line (the entry then only
// serves its Ender).
func Begin(l *Log, start time.Time) *Entry {
	e := entries.Get().(*Entry)
	e.log, e.Start = l, start
	return e
}

// Set sets field f to a copy of v.
func (e *Entry) Set(f Field, v []byte) {
	start := len(e.arena)
	e.arena = append(e.arena, v...)
	e.fields[f] = span{int32(start), int32(len(e.arena))}
}

// SetString sets field f to a copy of v.
func (e *Entry) SetString(f Field, v string) {
	start := len(e.arena)
	e.arena = append(e.arena, v...)
	e.fields[f] = span{int32(start), int32(len(e.arena))}
}

// Get returns field f (valid until End).
func (e *Entry) Get(f Field) []byte {
	s := e.fields[f]
	return e.arena[s.start:s.end]
}

// RequestBody is a request body whose bytes are counted as they are read.
type RequestBody interface {
	BytesRead() int64
	// Release lets go of it (see CountBody).
	Release()
}

// CountBody makes End take RequestBytes from b, and then release b: for
// a request whose body may still stream upstream while its response does
// (full duplex), when the entry ends with the response's body. The
// caller holds b for the entry.
func (e *Entry) CountBody(b RequestBody) { e.body = b }

// End completes the entry at now (its duration is now - Start), writes
// its line and gives it back: the caller must not use it again.
func (e *Entry) End(now time.Time) {
	if b := e.body; b != nil {
		e.RequestBytes = b.BytesRead()
		b.Release()
	}
	if e.Ender != nil {
		e.Ender.Ended(e, now)
	}
	if e.log != nil {
		e.line = e.log.format.encode(e.line[:0], e, now.Sub(e.Start))
		e.log.sink.Write(e.line)
	}
	if cap(e.arena) > maxPooled || cap(e.line) > maxPooled {
		return
	}
	arena, line := e.arena[:0], e.line[:0]
	*e = Entry{arena: arena, line: line}
	entries.Put(e)
}

// BodyRelayed ends the entry of a request whose response body, n bytes,
// has been relayed (as an upstream.BodyWatcher).
func (e *Entry) BodyRelayed(n int64) {
	e.ResponseBytes = n
	e.End(time.Now())
}

// SetTraceparent sets TraceID from a W3C traceparent value, unless it
// is set already (by the request's server span).
func (e *Entry) SetTraceparent(traceparent []byte) {
	if s := e.fields[TraceID]; s.end > s.start {
		return
	}
	e.Set(TraceID, TraceIDOf(traceparent))
}

// TraceIDOf returns the trace id of a W3C traceparent value
// ("00-<32 hex>-<16 hex>-<2 hex>"), or nil when it is not one.
func TraceIDOf(traceparent []byte) []byte {
	if len(traceparent) < 55 || traceparent[2] != '-' || traceparent[35] != '-' || traceparent[52] != '-' {
		return nil
	}
	if len(traceparent) > 55 && (traceparent[0] == '0' && traceparent[1] == '0' || traceparent[55] != '-') {
		return nil // version 00 has no more fields; later ones go on after a '-'
	}
	id, zero := traceparent[3:35], true
	for _, c := range id {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		default:
			return nil
		}
		zero = zero && c == '0'
	}
	if zero || string(traceparent[:2]) == "ff" {
		return nil
	}
	return id
}
