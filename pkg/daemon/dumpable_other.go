//go:build !linux

package daemon

// notDumpable has no portable equivalent outside Linux (macOS denies
// task_for_pid to other users' processes by default).
func notDumpable() {}
