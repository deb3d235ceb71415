package gitimport

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/ohd-dev/ohd/pkg/hardgit"
	"github.com/ohd-dev/ohd/pkg/packcheck"
)

// ErrRefused wraps an import whose objects git's or ohd's validation
// refused (a corrupt, incomplete or oversized pack from the view): nothing
// was imported.
var ErrRefused = errors.New("refused by validation")

// Repo is the host repository objects are imported into.
type Repo struct {
	// CommonDir is its git common dir; the objects go to CommonDir/objects.
	CommonDir string
	// UID and GID are its owner: git runs as them, and what the import
	// creates belongs to them.
	UID, GID int
}

// target runs git on the common dir, with no work tree.
func (r Repo) target() hardgit.Target {
	return hardgit.Target{Dir: r.CommonDir, GitDir: r.CommonDir, UID: r.UID, GID: r.GID}
}

// Sandbox runs `ohctl view ARGS...` where it reaches the view and nothing
// else of the host; Import runs `ohctl view pack --git-dir <CommonDir>`
// there (package worktree's Sandbox).
type Sandbox interface {
	View(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error
}

// Importer imports objects from a git view into a host repository.
type Importer struct {
	// Git runs every git command of an import (required).
	Git hardgit.Runner
	// Limits bound what one import may declare; zero fields take
	// packcheck's defaults.
	Limits packcheck.Limits
	// MaxTreeDepth bounds how deeply an imported commit's trees nest.
	// Default: DefaultMaxTreeDepth.
	MaxTreeDepth int
	// Started is when this ohd started: a quarantine older than it was
	// left by an earlier (killed) ohd and is removed.
	Started time.Time
	// Log receives an info record of each removed quarantine. Default:
	// discard.
	Log *slog.Logger
	// Chown, if set, gives what the import creates to the repository's
	// owner (ohd runs as root); nil changes no owner.
	Chown func(path string, uid, gid int) error
}

func (m *Importer) git(ctx context.Context, t hardgit.Target, o hardgit.Opts, args ...string) (string, error) {
	return m.Git.Run(ctx, t, o, args...)
}

func (m *Importer) chown(path string, uid, gid int) error {
	if m.Chown == nil {
		return nil
	}
	return m.Chown(path, uid, gid)
}

func (m *Importer) log() *slog.Logger {
	if m.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return m.Log
}

func (m *Importer) maxTreeDepth() int {
	if m.MaxTreeDepth <= 0 {
		return DefaultMaxTreeDepth
	}
	return m.MaxTreeDepth
}

// isHexID reports whether s is a full object id (hardgit.IsObjectID).
func isHexID(s string) bool { return hardgit.IsObjectID(s) }

// truncate shortens s, quoted in an error message, to n bytes.
func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}
