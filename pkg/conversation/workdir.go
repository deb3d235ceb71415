package conversation

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/ohd-dev/ohd/pkg/workdir"
)

// makeWorkspace creates req.Workspace when req.MakeWorkspace asks for it
// and it does not exist, under one of req.WorkspaceRoots (resolved
// first), never inside a path ohd keeps from containers; see package
// workdir. It returns what it made, for Undo when the create fails.
func (m *Manager) makeWorkspace(req CreateRequest) (*workdir.Made, error) {
	if !req.MakeWorkspace {
		return nil, nil
	}
	if _, err := os.Lstat(req.Workspace); !errors.Is(err, fs.ErrNotExist) {
		return nil, nil // exists (or unreadable): Inspect decides
	}
	for _, p := range m.protected {
		if overlaps(req.Workspace, p) {
			return nil, fmt.Errorf("%w: the workspace %s overlaps %s, which ohd keeps from containers (its state, sockets, worktrees, or the engine's socket): choose a project directory", ErrInvalid, req.Workspace, p)
		}
	}
	made, err := workdir.Make(req.Workspace, canonicalPaths(req.WorkspaceRoots))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if len(made.Created()) > 0 {
		m.log.Info("made the conversation's working directory", "path", req.Workspace, "created", len(made.Created()))
	}
	return made, nil
}
