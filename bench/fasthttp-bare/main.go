// Command fasthttp-bare is the reference point of ebb's benchmark: the
// simplest reverse proxy fasthttp allows (one HostClient, no routing, no
// header rules, no metrics, no timeouts). ebb's goal is to cost no more
// than this while doing everything it does.
package main

import (
	"flag"
	"log"

	"github.com/valyala/fasthttp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18083", "address to serve on")
	origin := flag.String("origin", "127.0.0.1:18000", "upstream host:port")
	flag.Parse()
	hc := &fasthttp.HostClient{Addr: *origin, MaxConns: 512}
	handler := func(ctx *fasthttp.RequestCtx) {
		if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
			ctx.Error("bad gateway", fasthttp.StatusBadGateway)
		}
	}
	log.Fatal((&fasthttp.Server{Handler: handler}).ListenAndServe(*listen))
}
