package daemon

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/localbus/localbus/daemon/daemontest"
)

func TestMain(m *testing.M) {
	// The socket variable of the developer's shell would override the
	// configurations that tests load.
	os.Unsetenv("LOCALBUS_SOCKET")
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		// The end-to-end tests build the daemon once; remove the binary.
		daemontest.Cleanup()
		os.Exit(code)
	}))
}
