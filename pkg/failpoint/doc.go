// Package failpoint lets crash tests stop ohd at a named step.
//
// Release builds compile Hit to nothing. A binary built with the build tag
// ohd_failpoints reads OHD_FAILPOINTS, a comma-separated list of step names,
// and kills its own process with SIGKILL when it reaches one of them, so a
// test can check that every step is recoverable after a crash.
//
// Start at [Hit] (failpoint.go, with its two builds in on.go and off.go),
// [Steps] (every name, in order) and [On] (the switches).
package failpoint
