package cluster

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// The ewma balancer: peak-EWMA (Finagle's, as linkerd2-proxy balances).
// Each endpoint keeps an estimate of its response latency (the time to a
// response head), which jumps up at once to a slower response and comes
// down gradually as faster ones arrive, and as time passes (by e in
// ewmaDecay, whether answers come or not, so that an endpoint out of
// favour is tried again). A request goes to the less loaded of two random
// endpoints, load being the estimate times (requests in flight + 1): a
// slow endpoint and a busy one both get less. A failure (a 5xx, a
// refused connection, a reset, a timeout) is observed as a slow answer
// (see failureCost), so that an endpoint failing fast does not look fast.
const (
	// ewmaDecay is the estimate's time constant: it falls by e in that
	// time.
	ewmaDecay = 10 * time.Second
	// failureFloor is the least a failure costs; failureFactor how many
	// times the current estimate it costs at least.
	failureFloor  = 10 * time.Millisecond
	failureFactor = 5
	// ewmaFloor keeps the load of an endpoint with no estimate yet (new,
	// or long idle) above zero, so that its requests in flight count.
	ewmaFloor = float64(time.Microsecond)
	// minWeight is how far an answer faster than the estimate moves it.
	minWeight = 0.05
)

// ewma is an endpoint's latency estimate. observe is serialized by mu;
// cost reads without it.
type ewma struct {
	mu    sync.Mutex
	est   atomic.Uint64 // float64 bits, nanoseconds, as of stamp
	stamp atomic.Int64  // unix nanoseconds of the last observation; 0: none yet
}

// cost returns the estimate decayed to now (unix nanoseconds).
func (e *ewma) cost(now int64) float64 {
	stamp := e.stamp.Load()
	if stamp == 0 {
		return 0
	}
	est := math.Float64frombits(e.est.Load())
	if age := now - stamp; age > 0 {
		est *= math.Exp(-float64(age) / float64(ewmaDecay))
	}
	return est
}

// observe records a response that took rtt; failed says it was a failure,
// which counts as failureCost. The estimate as it stands now (decayed,
// see cost) is the belief the answer is weighed against: a slower answer
// is believed at once (the peak), a faster one moves it by minWeight of
// the difference, so that one fast answer does not undo a slow record
// but a run of them does.
func (e *ewma) observe(now int64, rtt time.Duration, failed bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	cur, obs := e.cost(now), float64(rtt)
	if failed {
		obs = failureCost(cur, obs)
	}
	next := obs
	if e.stamp.Load() != 0 && obs < cur {
		next = cur + (obs-cur)*minWeight
	}
	e.est.Store(math.Float64bits(next))
	e.stamp.Store(now)
}

// ewmaOutcome says whether an exchange that ended with err, or with a
// response of status, is a failure for the estimate, and whether it
// counts at all: an error that is not the upstream's (the client went
// away, ebb's own connection pool was full) says nothing of its latency.
func ewmaOutcome(err error, status int) (failed, counts bool) {
	if err == nil {
		return status >= 500 && status != 501, true
	}
	k := faultOf(err)
	return true, k != 0 && k != upstream.KindOverloaded
}

// failureCost is what a failure that took rtt counts as, given the
// current estimate cur: failureFactor times the estimate, and never less
// than failureFloor, nor than the time it took.
func failureCost(cur, rtt float64) float64 {
	return max(cur*failureFactor, float64(failureFloor), rtt)
}

// ewmaLoad is the load the ewma balancer compares: the estimate times the
// requests in flight plus the one being placed.
func ewmaLoad(ep *Endpoint, now int64) float64 {
	return max(ep.ewma.cost(now), ewmaFloor) * float64(ep.inflight.Load()+1)
}

// latencyMS is ep's latency estimate in milliseconds, rounded to the
// microsecond, for /endpoints: 0 unless the cluster balances by ewma.
func (c *Cluster) latencyMS(ep *Endpoint, now int64) float64 {
	if c.balancer != config.BalancerEWMA {
		return 0
	}
	return math.Round(ep.ewma.cost(now)/1e3) / 1e3
}
