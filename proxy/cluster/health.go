package cluster

import (
	"sync/atomic"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// Passive health: an endpoint that fails is taken out of the balancer's
// choice for a while (ejected), so that requests stop going to an upstream
// that is gone or broken before discovery notices. A failed connect ejects
// at once (nothing listens there); consecutive 5xx answers eject after
// ejectAfter5xx of them. The ejection lasts ejectBase, doubling with each
// ejection in a row up to ejectMax; a success ends the streak. An
// ejection never takes a cluster's last available endpoint: when every
// endpoint is ejected, all are used (a panic threshold of one).
const (
	ejectAfter5xx = 5
	ejectBase     = time.Second
	ejectMax      = 30 * time.Second
)

// health is an endpoint's passive health state. Safe for concurrent use.
type health struct {
	ejected   atomic.Bool  // while set, ejectedTo says until when
	ejectedTo atomic.Int64 // unix nanoseconds
	fails5xx  atomic.Int32 // consecutive 5xx answers
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

// eject takes the endpoint out of the choice for its backoff.
func (h *health) eject() {
	n := min(h.streak.Add(1), 6)
	d := min(ejectBase<<(n-1), ejectMax)
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
	h := &ep.health
	switch {
	case connectFailed:
		c.ejectUnlessLast(ep)
	case status >= 500 && status != 501:
		if h.fails5xx.Add(1) >= ejectAfter5xx {
			h.fails5xx.Store(0)
			c.ejectUnlessLast(ep)
		}
	case status > 0:
		if h.fails5xx.Load() != 0 {
			h.fails5xx.Store(0)
		}
		if h.streak.Load() != 0 && h.available(nowNano) {
			h.streak.Store(0)
		}
	}
}

// ejectUnlessLast ejects ep unless no other endpoint would be left to pick.
func (c *Cluster) ejectUnlessLast(ep *Endpoint) {
	if ep.health.ejected.Load() {
		return
	}
	now := nowNano
	for _, other := range *c.endpoints.Load() {
		if other != ep && other.health.available(now) {
			ep.health.eject()
			c.metrics.Ejection()
			if ep.h2 != nil {
				// No new stream goes to it; its HTTP/2 connections close
				// (with ebb's GOAWAY) once their streams are done.
				ep.h2.CloseIdle()
			}
			return
		}
	}
}

func nowNano() int64 { return time.Now().UnixNano() }
