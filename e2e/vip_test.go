package e2e

import (
	"testing"

	"github.com/ebb-proxy/ebb/examples/vip"
)

// newVIP starts a simulated Service VIP listing backends (package
// examples/vip, which the rolling-restart demo uses too); it is closed at
// cleanup. Every scenario with a Service in front of ebb replicas
// (clients, or nginx, in front of the VIP) uses one.
func newVIP(t *testing.T, backends ...string) *vip.VIP {
	t.Helper()
	v, err := vip.New(backends...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}
