package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/ebb-proxy/ebb/admin"
	"github.com/ebb-proxy/ebb/drain"
)

// How `ebb drain -wait` shows the drain's progress (-progress).
const (
	progressAuto    = "auto"    // in place on a terminal, else lines
	progressInPlace = "inplace" // one line, rewritten at every sample
	progressLines   = "lines"   // a line per phase change, and at most one a second
	progressOff     = "off"     // only the outcome
)

// errNoProgress: the admin server has no /drain/progress (an older ebb).
var errNoProgress = errors.New("no progress stream")

// resolveProgress turns -progress auto into what stdout calls for.
func resolveProgress(mode string, stdout io.Writer) string {
	if mode != progressAuto {
		return mode
	}
	if f, ok := stdout.(*os.File); ok && os.Getenv("TERM") != "dumb" {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			return progressInPlace
		}
	}
	return progressLines
}

// followDrain reads the drain's progress stream at base and shows it on
// stdout as mode says, until the outcome, which it returns. It fails with
// errNoProgress when the server has no stream, and with the cause when
// the stream ends before the outcome.
func followDrain(ctx context.Context, client *http.Client, base, token, mode string, stdout io.Writer) (*drain.Outcome, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/drain/progress", nil)
	if err != nil {
		return nil, err
	}
	setToken(req, token)
	resp, err := client.Do(req)
	if err != nil {
		return nil, unwrapURL(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, errNoProgress
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /drain/progress answered %s", resp.Status)
	}
	v := &progressView{w: stdout, mode: mode}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		var l admin.ProgressLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			v.end()
			return nil, fmt.Errorf("GET /drain/progress: a line that is not progress: %.80q", sc.Text())
		}
		if l.Outcome != nil {
			v.end()
			return l.Outcome, nil
		}
		if l.Sample != nil {
			v.sample(*l.Sample)
		}
	}
	v.end()
	if err := sc.Err(); err != nil {
		return nil, unwrapURL(err)
	}
	return nil, errors.New("the progress stream ended before the drain did")
}

// progressView shows samples as its mode says.
type progressView struct {
	w    io.Writer
	mode string
	// last is the sample shown last; shown says there is one, open that
	// it is on a line not yet ended (in place).
	last        drain.Sample
	shown, open bool
}

func (v *progressView) sample(s drain.Sample) {
	phaseChanged := !v.shown || s.Phase != v.last.Phase
	switch v.mode {
	case progressOff:
		return
	case progressInPlace:
		// A phase's last state stays on screen; the next phase starts a
		// line of its own.
		if phaseChanged && v.open {
			fmt.Fprintln(v.w)
		}
		fmt.Fprintf(v.w, "\r\x1b[K%s", progressLine(s))
		v.open = true
	default:
		if !phaseChanged && s.AtMS-v.last.AtMS < 1000 {
			return
		}
		fmt.Fprintln(v.w, progressLine(s))
	}
	v.last, v.shown = s, true
}

// end ends the line being rewritten, if any.
func (v *progressView) end() {
	if v.open {
		fmt.Fprintln(v.w)
		v.open = false
	}
}

// progressLine is one sample as a person reads it.
func progressLine(s drain.Sample) string {
	c := s.Connections
	return fmt.Sprintf("drain %-8s %5.1fs since the trigger, %5.1fs left | connections %d: HTTP/1 %d, HTTP/2 %d, WebSocket %d, silent %d | in flight %d (event streams %d)",
		s.Phase, ms(s.AtMS).Seconds(), ms(s.LeftMS).Seconds(), c.Total, c.HTTP1.Total(), c.HTTP2.Total(), c.WebSocket.Total(), c.Unknown.Total(), s.InFlight, s.EventStreams)
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// outcomeText is how `ebb drain -wait` reports the end of the drain: the
// summary, then the reason with the exit status ebb gives it.
func outcomeText(addr string, o *drain.Outcome) string {
	status := exitOK
	if !(drain.Result{Reason: o.Reason}).Clean() {
		status = exitForced
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", o.Summary)
	fmt.Fprintf(&b, "ebb at %s: drain ended: %s after %.2fs, %d connections closed by force (ebb exits %d)\n",
		addr, o.Reason, ms(o.TookMS).Seconds(), o.ForcedCloses, status)
	return b.String()
}
