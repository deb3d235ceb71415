//go:build !ohd_failpoints

package failpoint

// Enabled reports whether this binary was built with failpoints.
const Enabled = false

// Hit does nothing in release builds.
func Hit(string) {}

// On is false in release builds.
func On(string) bool { return false }
