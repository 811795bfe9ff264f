package kubernetes

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts has ended when the package's tests have:
// lifecycles end with their owners. The tests build their sources through
// discovery.New, as the proxy does.
func TestMain(m *testing.M) {
	Use()
	goleak.VerifyTestMain(m)
}
