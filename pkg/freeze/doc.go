// Package freeze stops every other process of the caller's user in the
// caller's PID namespace (SIGSTOP to all: `ohctl view collect --freeze`, run in a
// conversation's container before its work is saved) and resumes them
// (Thaw). Start at All.
package freeze
