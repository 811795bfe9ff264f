package forward

import (
	"testing"

	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// TestUpstreamErrorKinds: for every kind of upstream failure, the access
// log's error kind of the answer ebb makes (by its message) is the
// kind's ErrorKind, which the failed attempt's client span gives as its
// error.type: one vocabulary for both (upstream_busy, not
// upstream_overloaded, for every connection to the endpoint busy).
func TestUpstreamErrorKinds(t *testing.T) {
	want := map[upstream.Kind]string{
		0:                       "upstream_broken", // no kind: a 502, as KindBroken
		upstream.KindConnect:    "upstream_connect",
		upstream.KindOverloaded: "upstream_busy",
		upstream.KindTimeout:    "upstream_timeout",
		upstream.KindBroken:     "upstream_broken",
		upstream.KindRefused:    "upstream_refused",
		upstream.KindInvalid:    "upstream_invalid",
		upstream.NumKinds:       "upstream_broken",
	}
	for k := upstream.Kind(0); k <= upstream.NumKinds; k++ {
		status, msg := upstreamAnswer(k)
		if got := errorKind(status, msg); got != k.ErrorKind() || got != want[k] {
			t.Errorf("kind %d (%s): the access log says %q (%d %q), the client span %q; want %q for both",
				k, k, got, status, msg, k.ErrorKind(), want[k])
		}
	}
}
