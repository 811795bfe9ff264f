package proxy

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// instruments exports, read at each scrape, what the listeners, the
// clusters of the current snapshot and the access log count themselves:
// requests in flight, bytes to and from clients, failed TLS handshakes,
// HTTP/2 stream resets and lost access log lines. The request path's own
// counts are package metrics'.
func (p *Proxy) instruments(meter metric.Meter) error {
	var (
		inFlight, upstreamInFlight                metric.Int64ObservableGauge
		received, sent, tlsFailures, resets, lost metric.Int64ObservableCounter
		err                                       error
	)
	gauge := func(g *metric.Int64ObservableGauge, name, desc string) {
		if err == nil {
			*g, err = meter.Int64ObservableGauge(name, metric.WithDescription(desc))
		}
	}
	counter := func(c *metric.Int64ObservableCounter, name, unit, desc string) {
		if err == nil {
			opts := []metric.Int64ObservableCounterOption{metric.WithDescription(desc)}
			if unit != "" {
				opts = append(opts, metric.WithUnit(unit))
			}
			*c, err = meter.Int64ObservableCounter(name, opts...)
		}
	}
	gauge(&inFlight, "ebb.requests.in_flight", "Requests being served, by listener.")
	gauge(&upstreamInFlight, "ebb.upstream.requests.in_flight", "Requests admitted to a cluster and not yet over, by cluster.")
	counter(&received, "ebb.downstream.received", "By", "Bytes received from clients on their connections (TLS records included), by listener.")
	counter(&sent, "ebb.downstream.sent", "By", "Bytes sent to clients on their connections (TLS records included), by listener.")
	counter(&tlsFailures, "ebb.tls.handshake_failures", "", "TLS handshakes that failed, by listener and reason: timeout (the client was silent until timeouts.header), eof (it went away), protocol (anything else: not TLS, nothing in common, an alert of the client's).")
	counter(&resets, "ebb.http2.stream_resets", "", "HTTP/2 streams reset with RST_STREAM, by listener, direction (sent by ebb, received from the client) and error code.")
	counter(&lost, "ebb.access_log.dropped_lines", "", "Access log lines lost: the output could not keep up, or failed.")
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		traffic := p.reg.Traffic()
		for _, l := range p.listeners {
			name := attribute.String("listener", l.cfg.Name)
			o.ObserveInt64(inFlight, l.fwd.InFlight(), metric.WithAttributes(name))
			b := traffic[l.cfg.Name]
			o.ObserveInt64(received, b.Received, metric.WithAttributes(name))
			o.ObserveInt64(sent, b.Sent, metric.WithAttributes(name))
			if l.cfg.TLS != nil {
				for i, reason := range failureReasons {
					o.ObserveInt64(tlsFailures, l.tlsFailures[i].Load(), metric.WithAttributes(name, attribute.String("reason", reason)))
				}
			}
			l.h2.Resets.Each(func(direction, code string, n int64) {
				o.ObserveInt64(resets, n, metric.WithAttributes(name, attribute.String("direction", direction), attribute.String("code", code)))
			})
		}
		if snap := p.snap.Load(); snap != nil {
			for name, c := range snap.Clusters {
				o.ObserveInt64(upstreamInFlight, c.InFlight(), metric.WithAttributes(attribute.String("cluster", name)))
			}
		}
		p.updateMu.Lock()
		s := p.sink
		p.updateMu.Unlock()
		if s != nil {
			o.ObserveInt64(lost, int64(s.Dropped()), metric.WithAttributes())
		}
		return nil
	}, inFlight, upstreamInFlight, received, sent, tlsFailures, resets, lost)
	return err
}
