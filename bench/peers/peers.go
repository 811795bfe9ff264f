// Package peers writes the configurations of the proxies ebb is compared
// with, nginx and HAProxy, from a small description of what each caller
// needs: listeners and their protocols, upstream groups and their
// keep-alive, timeouts. One writer serves the benchmark (bench/run.sh,
// through bench/harness), the rolling-restart example and the e2e tests,
// so that a fix to one peer's configuration reaches all three.
//
// The text comes from the templates beside this file (nginx.conf.tmpl,
// haproxy.cfg.tmpl); a field left at its zero value leaves the directive
// out, and the peer's default holds.
package peers

import (
	"bytes"
	"embed"
	"fmt"
	"text/template"
	"time"
)

//go:embed *.tmpl
var files embed.FS

var templates = template.Must(template.New("").Funcs(template.FuncMap{"dur": dur, "size": size}).ParseFS(files, "*.tmpl"))

// Proto is what a listener speaks to clients, or a server to its upstream.
type Proto int

const (
	// H1 is HTTP/1.1 (HAProxy also takes h2c on it, by its preface).
	H1 Proto = iota
	// H2C is HTTP/2 in cleartext with prior knowledge only.
	H2C
	// TLS is HTTP/2 over TLS (ALPN h2).
	TLS
)

// String names the protocol, as the templates compare it.
func (p Proto) String() string {
	switch p {
	case H1:
		return "h1"
	case H2C:
		return "h2c"
	case TLS:
		return "tls"
	}
	return fmt.Sprintf("Proto(%d)", int(p))
}

// render executes the named template with data.
func render(name string, data any) ([]byte, error) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name, data); err != nil {
		return nil, fmt.Errorf("peers: rendering %s: %w", name, err)
	}
	return b.Bytes(), nil
}

// dur writes d as both peers read it: whole seconds as "30s", anything
// finer in milliseconds.
func dur(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// size writes a byte count as nginx reads it, in KiB where it is whole.
func size(n int) string {
	if n%1024 == 0 {
		return fmt.Sprintf("%dk", n/1024)
	}
	return fmt.Sprint(n)
}
