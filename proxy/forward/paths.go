package forward

import (
	"sync"

	"github.com/ebb-proxy/ebb/proxy/paths"
	"github.com/ebb-proxy/ebb/proxy/route"
)

// pathBufs holds the buffers paths are rewritten into, each for the time
// of one request's routing.
var pathBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// match returns t's route for host and path, the path first rewritten as
// the listener's paths block says (nothing is done when it is all off).
// A rewrite that changes the path is what goes upstream (c.SetPath): the
// routes and the origin see one path. The error is the rewrite's, for a
// path refused.
func match[S string | []byte, C Call](c C, t *route.Table, host, path S) (*route.Route, error) {
	if !t.Paths.On() {
		return route.Match(t, host, path), nil
	}
	buf := pathBufs.Get().(*[]byte)
	defer pathBufs.Put(buf)
	p, changed, err := paths.Normalize((*buf)[:0], path, t.Paths)
	*buf = p[:0] // keeps what it grew to
	if err != nil {
		return nil, err
	}
	if changed {
		c.SetPath(p)
	}
	return route.Match(t, host, p), nil
}

// pathRefusal returns the message of the 400 for a path the rewrite
// refused with err.
func pathRefusal(err error) string {
	if err == paths.ErrEscapedSlash {
		return MsgEscapedSlash
	}
	return MsgBadPath
}
