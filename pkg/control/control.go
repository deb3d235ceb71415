package control

import (
	"fmt"
	"time"

	"github.com/ohd-dev/ohd/pkg/store"
)

// Error codes of the control API.
const (
	CodeBadRequest  = "bad_request" // 400: the request is malformed; nothing changed
	CodeForbidden   = "forbidden"   // 403: the caller may not use the control socket
	CodeNotFound    = "not_found"   // 404
	CodeConflict    = "conflict"    // 409: not possible in the current state
	CodeTooLarge    = "too_large"   // 413
	CodeUnavailable = "unavailable" // 503: a dependency (the Docker engine) does not answer
	CodeInternal    = "internal"    // 500
)

// Error is the body of an error answer.
type Error struct {
	Message string `json:"error"`
	Code    string `json:"code"`
	// Step names the create step that failed, when one did.
	Step string `json:"step,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// CreateRequest asks for a conversation.
type CreateRequest struct {
	// ID is the conversation's UUID; "" lets ohd generate one.
	ID string `json:"id,omitempty"`
	// Repo is the absolute host path of the workspace.
	Repo string `json:"repo"`
	// Worktree asks for a git worktree of Repo.
	Worktree bool `json:"worktree,omitempty"`
	// StartPoint is an explicit start point for the worktree's branch.
	StartPoint string `json:"start_point,omitempty"`
	// Grants are the conversation's initial grants.
	Grants store.Grants `json:"grants"`
}

// Pull is an image pull in progress: a create whose image the Docker
// engine lacks waits for it (GET /v1/pulls). The strings are the engine's,
// scrubbed of credentials.
type Pull struct {
	// Image is the reference being pulled.
	Image string `json:"image"`
	// Started is when the daemon asked the engine for it.
	Started time.Time `json:"started"`
	// Status is the engine's last status line of the image as a whole
	// ("Pulling from ...", "Digest: ...").
	Status string `json:"status,omitempty"`
	// Layers are the image's layers in the order the engine announced them.
	Layers []PullLayer `json:"layers"`
}

// PullLayer is one layer of a Pull.
type PullLayer struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	// Downloaded and Size are bytes of the layer's (compressed) download;
	// Size is 0 until the engine has said it.
	Downloaded int64 `json:"downloaded_bytes"`
	Size       int64 `json:"size_bytes"`
	// Done says the layer is in the engine.
	Done bool `json:"done"`
}

// Summary is a line saying how far the pull is: "2 of 5 layers done,
// 120.0 MiB of 480.3 MiB downloaded".
func (p Pull) Summary() string {
	done := 0
	var got, size int64
	for _, l := range p.Layers {
		if l.Done {
			done++
		}
		got, size = got+l.Downloaded, size+l.Size
	}
	if len(p.Layers) == 0 {
		if p.Status != "" {
			return p.Status
		}
		return "waiting for the engine"
	}
	s := fmt.Sprintf("%d of %d layers done", done, len(p.Layers))
	if size > 0 {
		s += fmt.Sprintf(", %s of %s downloaded", mebibytes(got), mebibytes(size))
	}
	return s
}

func mebibytes(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// GrantRequest adds a grant.
type GrantRequest struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Push (git grants) lists ref patterns a push through the relay may
	// create or update besides the conversation's own branches under
	// refs/heads/openhands/.
	Push []string `json:"push,omitempty"`
	// GitRelay (git grants): false serves the grant through git's
	// credential helper (the token enters the container); nil or true
	// through the relay.
	GitRelay *bool `json:"git_relay,omitempty"`
}

// ExecRequest runs a command in a conversation's container.
type ExecRequest struct {
	Cmd []string `json:"cmd"`
	// User is "uid[:gid]" or a name the image knows; "" runs as the
	// conversation's user.
	User string `json:"user,omitempty"`
	// WorkDir is the command's working directory; "" is the
	// conversation's working directory.
	WorkDir string `json:"workdir,omitempty"`
	// Stdin says the command's standard input follows this JSON value in
	// the request body (one newline after it, then raw bytes to EOF; with
	// TTY, ExecInput lines to EOF).
	Stdin bool `json:"stdin,omitempty"`
	// TTY runs the command on a pseudo-terminal (ohctl exec -t): the
	// command sees a terminal, its output comes as one "stdout" stream,
	// and the input carries window sizes along with the keystrokes.
	TTY bool `json:"tty,omitempty"`
	// Size is the terminal's window size at the start, with TTY.
	Size *TermSize `json:"size,omitempty"`
}

// ExecInput is one line of an exec's input with TTY: bytes typed, or the
// terminal's new window size.
type ExecInput struct {
	Data []byte    `json:"data,omitempty"`
	Size *TermSize `json:"size,omitempty"`
}

// TermSize is a terminal's window size in character cells.
type TermSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// ExecFrame is one line of an exec answer: output, or the exit code last.
type ExecFrame struct {
	Stream   string `json:"stream,omitempty"` // "stdout" or "stderr"
	Data     []byte `json:"data,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Error    string `json:"error,omitempty"`
}

// RestoreRequest asks for an ended conversation's work back in a new
// worktree of its repository.
type RestoreRequest struct {
	// Into is the new worktree's absolute path; "" means
	// <repository>.restore-<first 8 characters of the id>.
	Into string `json:"into,omitempty"`
}

// RestoreResult says where the work is.
type RestoreResult struct {
	ID     string `json:"id"`
	Path   string `json:"path"`
	Branch string `json:"branch"`
	// Already says the work was restored at Path by an earlier restore
	// (whose answer was lost): the retry changed nothing.
	Already bool `json:"already_restored,omitempty"`
	// Snapshot is the snapshot commit applied as uncommitted changes, "" if
	// there was none.
	Snapshot string `json:"snapshot,omitempty"`
	// Staged says what was staged is staged again (the snapshot's index).
	Staged bool `json:"staged,omitempty"`
	// Branches are local branches made from the view's side branches
	// (same name if free, else restored-<id prefix>/<name>).
	Branches []string `json:"branches,omitempty"`
	// Stash is the view's stash commit, put into refs/stash with the
	// older entries of its stash below it (StashEntries in all), all of
	// them below the user's own entries.
	Stash        string `json:"stash,omitempty"`
	StashEntries int    `json:"stash_entries,omitempty"`
	// Tags are the tags made from the view's tags (same name if free,
	// else restored-<id prefix>/<name>).
	Tags []string `json:"tags,omitempty"`
	// Kept lists the other refs of the conversation's git view kept in the
	// repository (refs/ohd/kept/<id>/...), for the user to look at.
	Kept []string `json:"kept,omitempty"`
	// Note says what else to know (for a conversation that worked in
	// place: where its files are).
	Note string `json:"note,omitempty"`
	// GitDirs are the git directories the agent had made in the user's
	// tree, moved out at the removal (relative to the tree); they come
	// back as files in the tar GitDirsArchive, next to Path (inert: no
	// git opens a repository in a tar), or, when it could not be
	// written, stay in GitDirsKept, which GitDirsNote says why.
	GitDirs        []string `json:"git_dirs,omitempty"`
	GitDirsArchive string   `json:"git_dirs_archive,omitempty"`
	GitDirsKept    string   `json:"git_dirs_kept,omitempty"`
	GitDirsNote    string   `json:"git_dirs_note,omitempty"`
}

// PruneRequest asks the daemon to clean up.
type PruneRequest struct {
	// DryRun reports what would be done and does nothing.
	DryRun bool `json:"dry_run"`
	// OlderThan limits pruning of conversations to those inactive for at
	// least this long (a Go duration, e.g. "72h"); "" means any age.
	OlderThan string `json:"older_than,omitempty"`
}

// PruneItem is one thing prune did, would do, or reports.
type PruneItem struct {
	// Kind is "conversation", "record", "container", "socket-dir",
	// "worktree-dir", "branch" or "snapshot".
	Kind string `json:"kind"`
	ID   string `json:"id,omitempty"`
	Path string `json:"path,omitempty"`
	// Action is "remove", "purge" (a deleted record), or "keep" (reported
	// only: user work ohd never deletes on its own).
	Action string `json:"action"`
	Detail string `json:"detail,omitempty"`
	Done   bool   `json:"done"`
	Error  string `json:"error,omitempty"`
}

// PruneReport is the answer of a prune.
type PruneReport struct {
	DryRun bool        `json:"dry_run"`
	Items  []PruneItem `json:"items"`
}

// Version is the answer of /v1/version.
type Version struct {
	Version    string `json:"version"`
	APIVersion string `json:"api_version"`
	Runtime    string `json:"runtime"`
	ServerID   string `json:"server_id"`
	StateDir   string `json:"state_dir"`
}

// DoctorCheck is one check of ohctl doctor.
type DoctorCheck struct {
	Conversation string `json:"conversation,omitempty"`
	Check        string `json:"check"`
	// Status is "ok", "warn" or "fail".
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Repair says what --repair would do (or did, with Repaired).
	Repair   string `json:"repair,omitempty"`
	Repaired bool   `json:"repaired,omitempty"`
}

// DoctorReport is the answer of /v1/doctor.
type DoctorReport struct {
	Checks []DoctorCheck `json:"checks"`
}

// OK reports whether no check failed.
func (r DoctorReport) OK() bool {
	for _, c := range r.Checks {
		if c.Status == "fail" {
			return false
		}
	}
	return true
}
