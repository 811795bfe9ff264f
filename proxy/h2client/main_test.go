package h2client_test

import (
	"testing"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// Every goroutine a test starts has ended when the package's tests have:
// a connection's read loop and writer end with it.
func TestMain(m *testing.M) { proxytest.VerifyNoLeaks(m) }
