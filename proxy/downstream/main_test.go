package downstream

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts has ended when the package's tests have:
// lifecycles end with their owners.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
