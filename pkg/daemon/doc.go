// Package daemon is `ohd serve`: it loads the configuration, opens the
// store, reconciles, and serves the control socket (for ohctl) and the
// conversation API, until its context ends.
//
// Start at cmd.go (the ohd command line and its exit statuses) and
// config.go (Config, its flags and OHD_* variables, and its checks); then
// daemon.go (Run: start-up, reconcile, serving, shutdown), control.go (the
// control API's handlers) and upstream.go (the --upstream agent server).
package daemon
