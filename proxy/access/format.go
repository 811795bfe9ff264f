package access

import (
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// encode appends e's line, newline included, in format f.
func (f Format) encode(b []byte, e *Entry, d time.Duration) []byte {
	switch f {
	case FormatText:
		return encodeText(b, e, d)
	case FormatCombined:
		return encodeCombined(b, e)
	}
	return encodeJSON(b, e, d)
}

// durationMillis appends d in milliseconds with microsecond precision.
func durationMillis(b []byte, d time.Duration) []byte {
	return strconv.AppendFloat(b, float64(d.Microseconds())/1000, 'f', -1, 64)
}

// appendTime appends t in UTC as RFC 3339 with milliseconds. The part
// up to the second is formatted once a second.
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	sec := t.Unix()
	c := lastSecond.Load()
	if c == nil || c.unix != sec {
		c = &secondText{unix: sec, text: t.Truncate(time.Second).AppendFormat(nil, "2006-01-02T15:04:05.")}
		lastSecond.Store(c)
	}
	b = append(b, c.text...)
	ms := t.Nanosecond() / 1e6
	return append(b, byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
}

// secondText is one second's formatted prefix.
type secondText struct {
	unix int64
	text []byte
}

var lastSecond atomic.Pointer[secondText]

func encodeJSON(b []byte, e *Entry, d time.Duration) []byte {
	b = append(b, `{"time":"`...)
	b = appendTime(b, e.Start)
	b = append(b, `","listener":`...)
	b = jsonString(b, e.Listener)
	b = append(b, `,"protocol":`...)
	b = jsonString(b, e.Protocol)
	b = append(b, `,"client":`...)
	b = jsonString(b, e.Get(Client))
	b = append(b, `,"method":`...)
	b = jsonString(b, e.Get(Method))
	b = append(b, `,"authority":`...)
	b = jsonString(b, e.Get(Authority))
	b = append(b, `,"path":`...)
	b = jsonString(b, e.Get(Path))
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, `,"request_bytes":`...)
	b = strconv.AppendInt(b, e.RequestBytes, 10)
	b = append(b, `,"response_bytes":`...)
	b = strconv.AppendInt(b, e.ResponseBytes, 10)
	b = append(b, `,"duration_ms":`...)
	b = durationMillis(b, d)
	b = append(b, `,"cluster":`...)
	b = jsonString(b, e.Cluster)
	b = append(b, `,"upstream":`...)
	b = jsonString(b, e.Upstream)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(e.Attempts), 10)
	b = append(b, `,"error":`...)
	b = jsonString(b, e.Error)
	b = append(b, `,"request_id":`...)
	b = jsonString(b, e.Get(RequestID))
	b = append(b, `,"trace_id":`...)
	b = jsonString(b, e.Get(TraceID))
	b = append(b, `,"draining":`...)
	b = strconv.AppendBool(b, e.Draining)
	b = append(b, `,"user_agent":`...)
	b = jsonString(b, e.Get(UserAgent))
	b = append(b, `,"referer":`...)
	b = jsonString(b, e.Get(Referer))
	return append(b, "}\n"...)
}

const hex = "0123456789abcdef"

// safe marks the bytes a JSON string holds as they are.
var safe = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != 0x7f
	}
	return t
}()

// jsonString appends s as a JSON string. Bytes that are not valid UTF-8
// become U+FFFD, as encoding/json writes them, so that every line parses.
func jsonString[S string | []byte](b []byte, s S) []byte {
	b = append(b, '"')
	i := 0
	for i < len(s) && safe[s[i]] {
		i++
	}
	b = append(b, s[:i]...) // most values need no escape
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c >= 0x20 && c != 0x7f:
				b = append(b, c)
			case c == '\n':
				b = append(b, `\n`...)
			case c == '\r':
				b = append(b, `\r`...)
			case c == '\t':
				b = append(b, `\t`...)
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			continue
		}
		r, n := decodeRune(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}

func decodeRune[S string | []byte](s S) (rune, int) {
	switch s := any(s).(type) {
	case string:
		return utf8.DecodeRuneInString(s)
	case []byte:
		return utf8.DecodeRune(s)
	}
	return utf8.RuneError, 1
}

func encodeText(b []byte, e *Entry, d time.Duration) []byte {
	b = append(b, "time="...)
	b = appendTime(b, e.Start)
	b = textPair(b, " listener=", e.Listener)
	b = textPair(b, " protocol=", e.Protocol)
	b = textPair(b, " client=", e.Get(Client))
	b = textPair(b, " method=", e.Get(Method))
	b = textPair(b, " authority=", e.Get(Authority))
	b = textPair(b, " path=", e.Get(Path))
	b = append(b, " status="...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, " request_bytes="...)
	b = strconv.AppendInt(b, e.RequestBytes, 10)
	b = append(b, " response_bytes="...)
	b = strconv.AppendInt(b, e.ResponseBytes, 10)
	b = append(b, " duration_ms="...)
	b = durationMillis(b, d)
	b = textPair(b, " cluster=", e.Cluster)
	b = textPair(b, " upstream=", e.Upstream)
	b = append(b, " attempts="...)
	b = strconv.AppendInt(b, int64(e.Attempts), 10)
	b = textPair(b, " error=", e.Error)
	b = textPair(b, " request_id=", e.Get(RequestID))
	b = textPair(b, " trace_id=", e.Get(TraceID))
	b = append(b, " draining="...)
	b = strconv.AppendBool(b, e.Draining)
	b = textPair(b, " user_agent=", e.Get(UserAgent))
	b = textPair(b, " referer=", e.Get(Referer))
	return append(b, '\n')
}

// textPair appends key and v, quoted as a JSON string when v is empty or
// holds a space, '=', '"', a control byte or a byte beyond ASCII (what
// logfmt readers and slog's text handler expect).
func textPair[S string | []byte](b []byte, key string, v S) []byte {
	b = append(b, key...)
	quote := len(v) == 0
	for i := 0; i < len(v) && !quote; i++ {
		c := v[i]
		quote = c <= ' ' || c == '=' || c == '"' || c >= 0x7f
	}
	if quote {
		return jsonString(b, v)
	}
	return append(b, v...)
}

// combinedTime is the time layout of the combined log format.
const combinedTime = "02/Jan/2006:15:04:05 -0700"

// encodeCombined writes the combined log format as nginx does:
//
//	client - - [time] "method path protocol" status bytes "referer" "user-agent"
//
// with a value's '"', '\' and bytes outside printable ASCII as \xHH, and
// "-" for an absent one.
func encodeCombined(b []byte, e *Entry) []byte {
	b = combinedValue(b, e.Get(Client), false)
	b = append(b, " - - ["...)
	b = e.Start.AppendFormat(b, combinedTime)
	b = append(b, `] "`...)
	b = combinedValue(b, e.Get(Method), true)
	b = append(b, ' ')
	b = combinedValue(b, e.Get(Path), true)
	b = append(b, ' ')
	b = combinedValue(b, e.Protocol, true)
	b = append(b, `" `...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.ResponseBytes, 10)
	b = append(b, ` "`...)
	b = combinedValue(b, e.Get(Referer), false)
	b = append(b, `" "`...)
	b = combinedValue(b, e.Get(UserAgent), false)
	return append(b, "\"\n"...)
}

func combinedValue[S string | []byte](b []byte, v S, inRequestLine bool) []byte {
	if len(v) == 0 {
		if inRequestLine {
			return b
		}
		return append(b, '-')
	}
	for i := range len(v) {
		c := v[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			b = append(b, '\\', 'x', hex[c>>4], hex[c&0xf])
			continue
		}
		b = append(b, c)
	}
	return b
}
