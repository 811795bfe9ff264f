package h1

import (
	"testing"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// Every goroutine a test starts has ended when the package's tests have:
// lifecycles end with their owners.
func TestMain(m *testing.M) { proxytest.VerifyNoLeaks(m) }
