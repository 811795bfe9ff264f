// Exchange: a stream's whole exchange, its request body written by a
// goroutine of its own while the response comes down, and the caller's
// context watched.

package h2client

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// copyBufPool holds the buffers request bodies are pumped through.
var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// pump writes a request body as it comes, then the trailer block trailers
// returns (nil trailers: the body has none, and its last bytes, when they
// come with its end, end the stream in their DATA frame, as gRPC servers
// see from any client). It returns when the body ends or the stream does
// (which closes the body, ending a read waiting for the client); the body
// is closed either way. It is the one goroutine a stream may have.
func (st *Stream) pump(body io.ReadCloser, trailers func() []byte) {
	defer st.pumping.Done()
	defer body.Close()
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	ends := trailers == nil
	for {
		n, err := body.Read(*bp)
		if n > 0 {
			if werr := st.write((*bp)[:n], err == io.EOF && ends); werr != nil {
				return
			}
			if err == io.EOF && ends {
				return
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			// The client's body failed: the upstream must not take what
			// came of it for a whole request.
			st.abort(err)
			return
		}
	}
	var blk []byte
	if trailers != nil {
		blk = trailers()
	}
	_ = st.CloseWrite(blk)
}

// Exchange sends r on a stream, its body (nil: none) written by a
// goroutine of the stream's (see pump), and waits for the response head,
// for at most the pool's response timeout or until ctx ends. A ctx that
// is an upstream.ConnWatcher (an HTTP/2 client's stream) resets the
// upstream's stream when it ends, until Close, without a channel or a
// goroutine per request. On error the stream is over, its body writer
// returned, and body closed.
func (p *Pool) Exchange(ctx context.Context, r *Request, body io.ReadCloser, trailers func() []byte) (*Stream, error) {
	r.Streamed, r.BodyCloser = body != nil, body
	st, err := p.Open(ctx, r)
	if err != nil {
		if body != nil {
			body.Close()
		}
		return nil, err
	}
	if body != nil {
		st.pumping.Add(1)
		go st.pump(body, trailers)
	}
	wait := ctx
	if w, ok := ctx.(upstream.ConnWatcher); ok {
		stop := w.WatchConn(canceller{st})
		st.c.mu.Lock()
		st.stopWatch = stop
		st.c.mu.Unlock()
		wait = context.Background()
	}
	timeout, timeoutErr := p.cfg.ResponseTimeout, errResponseTimeout
	if !r.Deadline.IsZero() {
		if d := time.Until(r.Deadline); timeout <= 0 || d < timeout {
			timeout, timeoutErr = max(d, time.Nanosecond), ErrDeadline
		}
	}
	if err := st.await(wait, timeout, timeoutErr); err != nil {
		st.Close()
		st.Wait()
		return nil, err
	}
	return st, nil
}

// canceller resets a stream whose client went away.
type canceller struct{ st *Stream }

func (c canceller) Close() error {
	c.st.abort(context.Canceled)
	return nil
}

// Wait waits for the stream's body writer, if any, to return: after
// Close, promptly (the body it reads is closed).
func (st *Stream) Wait() { st.pumping.Wait() }
