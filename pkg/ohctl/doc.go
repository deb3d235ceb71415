// Package ohctl is the ohctl command line: the operator's client of ohd's
// control socket, and, inside containers, git's credential helper and the
// entrypoint wrapper that hands the inner session key to the agent server.
//
// cmd/ohctl only calls Main. Every command prints an aligned table (or,
// with --json, the control API's JSON), and every error says what failed
// and what to do.
//
// Start at app.go (Main and the command tree); commands.go holds the
// operator's commands, print.go their tables, incontainer.go the commands
// run inside a container (git-credential, inner-exec, view), supervise.go
// the in-container supervisor and relay, terminal.go `exec -t`, and
// pull.go the image pull progress `create` shows.
package ohctl
