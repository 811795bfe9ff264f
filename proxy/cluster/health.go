package cluster

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/h2client"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// Passive health (outlier detection): an endpoint that fails is taken out
// of the balancer's choice for a while (ejected), so that requests stop
// going to an upstream that is gone or broken before discovery notices.
// A failed connect ejects at once (nothing listens there); consecutive
// 5xx answers, or consecutive gateway errors, eject after the cluster's
// outlier_detection counts. The ejection lasts base_ejection_time,
// doubling with each ejection in a row up to max_ejection_time; a success
// ends the streak. At most max_ejected_percent of the endpoints are
// ejected at once (one always may be), and never the last available one:
// when every endpoint is ejected, all are used.

// health is an endpoint's passive health state. Safe for concurrent use.
type health struct {
	ejected   atomic.Bool  // while set, ejectedTo says until when
	ejectedTo atomic.Int64 // unix nanoseconds
	fails5xx  atomic.Int32 // consecutive 5xx answers
	failsGW   atomic.Int32 // consecutive gateway errors
	streak    atomic.Int32 // ejections in a row, for the backoff
	ejections atomic.Int64 // ejections in all, for /endpoints
}

// available reports whether the endpoint may be picked at now (unix ns).
// Healthy endpoints cost one atomic load.
func (h *health) available(now func() int64) bool {
	if !h.ejected.Load() {
		return true
	}
	if now() < h.ejectedTo.Load() {
		return false
	}
	h.ejected.Store(false)
	return true
}

// eject takes the endpoint out of the choice for its backoff: base,
// doubled with each ejection in a row, up to most.
func (h *health) eject(base, most time.Duration) {
	n := min(h.streak.Add(1), 16)
	d := min(base<<(n-1), most)
	if d <= 0 { // overflow
		d = most
	}
	h.ejectedTo.Store(time.Now().Add(d).UnixNano())
	h.ejected.Store(true)
	h.ejections.Add(1)
}

// outcome records how an exchange with ep ended, rtt after it was sent:
// with the response status, or with err (status 0). For passive health,
// only a failed connect and 5xx answers count; the ewma balancer also
// takes the time, and any failure of the upstream's as a slow answer.
func (c *Cluster) outcome(ep *Endpoint, err error, status int, rtt time.Duration) {
	connectFailed := err != nil && upstream.IsConnectFailure(err)
	if c.balancer == config.BalancerEWMA {
		if failed, counts := ewmaOutcome(err, status); counts {
			ep.ewma.observe(nowNano(), rtt, failed)
		}
	}
	h, od := &ep.health, &c.cfg.OutlierDetection
	gateway := status == 502 || status == 503 || status == 504
	if err != nil {
		switch faultOf(err) {
		case upstream.KindTimeout, upstream.KindBroken, upstream.KindInvalid:
			gateway = true
		case 0: // not the upstream's: says nothing of the endpoint
			return
		}
	}
	switch {
	case connectFailed:
		c.ejectUnlessLast(ep)
	case status >= 500 && status != 501 || gateway:
		fx := status >= 500 && status != 501 && od.Consecutive5xx > 0 && int(h.fails5xx.Add(1)) >= od.Consecutive5xx
		fg := gateway && od.ConsecutiveGatewayErrors > 0 && int(h.failsGW.Add(1)) >= od.ConsecutiveGatewayErrors
		if fx || fg {
			h.fails5xx.Store(0)
			h.failsGW.Store(0)
			c.ejectUnlessLast(ep)
		}
	case status > 0:
		if h.fails5xx.Load() != 0 {
			h.fails5xx.Store(0)
		}
		if h.failsGW.Load() != 0 {
			h.failsGW.Store(0)
		}
		if h.streak.Load() != 0 && h.available(nowNano) {
			h.streak.Store(0)
		}
	}
}

// ejectUnlessLast ejects ep unless no other endpoint would be left to
// pick, or the cluster's share of ejected endpoints is reached.
func (c *Cluster) ejectUnlessLast(ep *Endpoint) {
	if ep.health.ejected.Load() {
		return
	}
	od := &c.cfg.OutlierDetection
	eps := *c.endpoints.Load()
	ejected, other := 0, false
	for _, e := range eps {
		switch {
		case !e.health.available(nowNano):
			ejected++
		case e != ep:
			other = true
		}
	}
	if !other || od.MaxEjectedPercent == 0 || ejected >= max(1, len(eps)*od.MaxEjectedPercent/100) {
		return
	}
	ep.health.eject(od.BaseEjectionTime, od.MaxEjectionTime)
	c.metrics.Ejection()
	if ep.h2 != nil {
		// No new stream goes to it; its HTTP/2 connections close
		// (with ebb's GOAWAY) once their streams are done.
		ep.h2.CloseIdle()
	}
}

// faultOf is the kind of a failed exchange's error when the upstream is to
// blame for it, and 0 when it is not: the client went away (its context
// was cancelled), or a gRPC call's own deadline passed.
func faultOf(err error) upstream.Kind {
	if errors.Is(err, context.Canceled) || errors.Is(err, h2client.ErrDeadline) {
		return 0
	}
	return upstream.KindOf(err)
}

func nowNano() int64 { return time.Now().UnixNano() }
