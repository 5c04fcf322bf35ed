package daemon

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The socket variable of the developer's shell would override the
	// configurations that tests load.
	os.Unsetenv("LOCALBUS_SOCKET")
	goleak.VerifyTestMain(m)
}
