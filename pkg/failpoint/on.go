//go:build ohd_failpoints

package failpoint

import (
	"os"
	"slices"
	"strings"
	"syscall"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

var active = strings.Split(os.Getenv("OHD_FAILPOINTS"), ",")

// Hit kills the process with SIGKILL if name is listed in OHD_FAILPOINTS.
func Hit(name string) {
	if !slices.Contains(Steps, name) {
		panic("failpoint: unknown step " + name)
	}
	if slices.Contains(active, name) {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns: the signal is on its way
	}
}

// On reports whether the switch name (one of Switches) is listed in
// OHD_FAILPOINTS.
func On(name string) bool {
	if !slices.Contains(Switches, name) {
		panic("failpoint: unknown switch " + name)
	}
	return slices.Contains(active, name)
}
