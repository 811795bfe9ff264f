package proxytest

import (
	"context"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy/downstream"
)

// regServer is the drain.Server of StartDrain: closing closes every
// connection, as the proxy's Close does.
type regServer struct{ reg *downstream.Registry }

func (regServer) StopAccepting() {}
func (s regServer) Close() error { s.reg.CloseAll(); return nil }

// StartDrain runs a drain controller over reg with the given delay and no
// spread, triggered now; stop forces it to its end and waits for it. In a
// testing/synctest bubble its timeline runs in fake time.
func StartDrain(reg *downstream.Registry, delay time.Duration) (stop func()) {
	cfg := config.Drain{Delay: delay, Quiet: time.Second, Timeout: time.Minute, AcceptUntil: config.AcceptUntilExit,
		HTTP1: config.DrainHTTP1{IdleClose: config.Never}, HTTP2: config.DrainHTTP2{GoawayGrace: time.Second}}
	_, stop = RunDrain(reg, cfg)
	return stop
}

// RunDrain runs a drain controller with cfg over reg, triggered now. done
// gives its result once it has ended; stop forces it to its end and waits
// for it.
func RunDrain(reg *downstream.Registry, cfg config.Drain) (done <-chan drain.Result, stop func()) {
	ctl := drain.NewController(cfg, reg, regServer{reg}, Discard())
	out := make(chan drain.Result, 1)
	ended := make(chan struct{})
	go func() {
		res, _ := ctl.Run(context.Background())
		out <- res
		close(ended)
	}()
	ctl.Trigger("test")
	return out, func() {
		ctl.Force("test")
		<-ended
	}
}
