package forward

import (
	"context"
	"log/slog"
	"time"
)

// accessLog writes one access log line when telemetry.log.access is on.
// It allocates, so it is off by default.
func (l *Listener) accessLog(c Call, cluster string, status int, start time.Time) {
	access := l.Snapshot.Load().Access
	if access == nil {
		return
	}
	client, method, host, uri, bytes := c.AccessFields()
	access.LogAttrs(context.Background(), slog.LevelInfo, "request",
		slog.String("listener", l.Config.Name),
		slog.String("client", client),
		slog.String("method", method),
		slog.String("host", host),
		slog.String("uri", uri),
		slog.String("cluster", cluster),
		slog.Int("status", status),
		slog.Int("bytes", bytes),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
	)
}
