package worktree

import (
	"context"

	"github.com/ohd-dev/ohd/pkg/hardgit"
)

// Every git command of this package runs through package hardgit; these
// are its names here.
type (
	gitTarget  = hardgit.Target
	runOpts    = hardgit.Opts
	filterMemo = hardgit.FilterMemo
)

// git runs git with args at t, hardened (hardgit.Runner.Run), as the
// Manager's git binary, under its timeout and effective uid.
func (m *Manager) git(ctx context.Context, t gitTarget, o runOpts, args ...string) (string, error) {
	r := m.runner()
	return r.Run(ctx, t, o, args...)
}

// runner is the Runner of m's git: its binary, timeout, log and
// effective uid (read at each call: tests change m.euid).
func (m *Manager) runner() hardgit.Runner {
	return hardgit.Runner{Path: m.gitPath, Timeout: m.timeout, Log: m.log, EUID: m.euid}
}
