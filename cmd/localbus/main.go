// Localbus is a local event bus: the daemon (localbus serve) and its client
// command line in one binary.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "localbus: not yet usable")
	os.Exit(1)
}
