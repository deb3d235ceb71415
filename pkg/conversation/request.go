package conversation

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ohd-dev/ohd/pkg/egress"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

// The create request and its checks, all free of side effects.

// CreateRequest asks for a new conversation.
type CreateRequest struct {
	// ID is the conversation's UUID; "" generates one.
	ID string
	// Workspace is the absolute host path of the workspace (required).
	Workspace string
	// Worktree asks for a git worktree of the workspace's repository. A
	// workspace that is not a git repository starts without one, and the
	// record's notes say so.
	Worktree bool
	// StartPoint is an explicit start point for the worktree's branch.
	StartPoint string
	// Grants are the conversation's initial grants.
	Grants store.Grants
	// Request is a secret-free copy of the API's create body, kept in the
	// record.
	Request json.RawMessage
	// LaunchedAgentProfile is kept in the record (see the store's field).
	LaunchedAgentProfile json.RawMessage
	// Prepare, if set, runs under the conversation's lock once the
	// create's record exists and before anything else is made: it keeps
	// the create's own credentials (named "<id>.<name>", which every undo
	// and removal of the conversation deletes) and returns their grants,
	// added to Grants. A create of an existing conversation never runs it.
	Prepare func(ctx context.Context, id string) (store.Grants, error)
	// MakeWorkspace creates a missing Workspace under one of
	// WorkspaceRoots first, as the agent server creates a missing
	// working_dir (workdir.go); without it a missing workspace is refused.
	MakeWorkspace  bool
	WorkspaceRoots []string
	// ForkOf, if set, names the conversation this one is a fork of (the
	// conversation API's POST /{id}/fork, DESIGN §7): the new one takes a
	// copy of its own credentials under its own names (store.CopyScoped)
	// and its other grants, and the fork's state that ForkOf's inner server
	// wrote under the new id (openhands.CopyForkState) becomes the new
	// one's before its container starts.
	ForkOf string
	// Forward, if set, runs after the container is ready and before the
	// conversation is marked running (the conversation API forwards its
	// create to the inner server here). Its error undoes everything.
	Forward func(ctx context.Context, c store.Conversation, t Target) error
}

// Validate checks a request without side effects.
func (r *CreateRequest) Validate() error {
	if r.ID != "" && !store.ValidID(r.ID) {
		return fmt.Errorf("%w: conversation id %q is not a UUID (8-4-4-4-12 lower-case hex digits)", ErrInvalid, r.ID)
	}
	if r.Workspace == "" {
		return fmt.Errorf("%w: no workspace: pass the absolute path of a directory", ErrInvalid)
	}
	if len(r.Workspace) > maxPath {
		return fmt.Errorf("%w: the workspace path is %d bytes long, the limit is %d", ErrInvalid, len(r.Workspace), maxPath)
	}
	if r.StartPoint != "" && !r.Worktree {
		return fmt.Errorf("%w: a start point was given without a worktree: add --worktree (worktree: true) or drop the start point", ErrInvalid)
	}
	return ValidateGrants(r.Grants)
}

// maxPath is the longest workspace path accepted (Linux's PATH_MAX).
const maxPath = 4096

// checkProtected refuses a workspace (or repository git dir) that is,
// contains, or lies inside one of the protected paths.
func (m *Manager) checkProtected(repo worktree.Repo) error {
	for _, p := range m.protected {
		for _, path := range []string{repo.Workspace, repo.CommonDir} {
			if path == "" {
				continue
			}
			if overlaps(path, p) {
				return fmt.Errorf("%w: the workspace %s overlaps %s, which ohd keeps from containers (its state, sockets, worktrees, or the engine's socket): choose a project directory", ErrInvalid, path, p)
			}
		}
	}
	return nil
}

// overlaps reports whether a and b are the same path or one contains the
// other.
func overlaps(a, b string) bool {
	return a == b || strings.HasPrefix(a, strings.TrimSuffix(b, "/")+"/") || strings.HasPrefix(b, strings.TrimSuffix(a, "/")+"/")
}

// canonicalPaths resolves symlinks of each path that exists (its parent
// for one that does not), so overlap checks compare what the kernel sees.
func canonicalPaths(paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == "" || !filepath.IsAbs(p) {
			continue
		}
		p = filepath.Clean(p)
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		} else if r, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
			p = filepath.Join(r, filepath.Base(p))
		}
		out = append(out, p)
	}
	return out
}

// ValidateGrants checks every granted name, and the git grants' options.
func ValidateGrants(g store.Grants) error {
	for _, kind := range store.Kinds {
		for _, name := range *g.List(kind) {
			if err := ValidateGrant(kind, name); err != nil {
				return err
			}
		}
	}
	return validateGitOptions(g)
}

// ValidateGrant checks one grant: kind is secret, git, llm, oauth or mcp;
// a git name is "host[:port][/path/prefix]", the others are store names.
func ValidateGrant(kind, name string) error {
	switch kind {
	case store.KindSecret, store.KindLLM, store.KindOAuth, store.KindMCP:
		if !store.ValidName(name) {
			return fmt.Errorf("%w: %s name %q: use 1-128 characters of A-Z a-z 0-9 . _ - (not starting with . or -)", ErrInvalid, kind, name)
		}
	case store.KindNet:
		if _, err := egress.ParseDest(name); err != nil {
			return fmt.Errorf("%w: net grant: %v", ErrInvalid, err)
		}
	case store.KindGit:
		if !validGitGrant(name) {
			return fmt.Errorf("%w: git grant %q: use host[:port][/path/prefix], e.g. github.com/my-org", ErrInvalid, name)
		}
	default:
		return fmt.Errorf("%w: grant kind %q: use one of %s", ErrInvalid, kind, strings.Join(store.Kinds, ", "))
	}
	return nil
}

// canonicalGrant returns a valid grant in the form it is stored in: a net
// destination with its port ("example.com" is "example.com:443").
func canonicalGrant(kind, name string) string {
	if kind == store.KindNet {
		if d, err := egress.ParseDest(name); err == nil {
			return d.String()
		}
	}
	return name
}

func validGitGrant(s string) bool {
	if s == "" || len(s) > 512 || strings.Contains(s, "//") || strings.HasSuffix(s, "/") {
		return false
	}
	host, path, _ := strings.Cut(s, "/")
	if host == "" || strings.HasPrefix(host, ".") || strings.HasPrefix(host, "-") {
		return false
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == ':' || c == '[' || c == ']') {
			return false
		}
	}
	for _, seg := range strings.Split(path, "/") {
		if path != "" && (seg == "" || seg == "." || seg == "..") {
			return false
		}
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; c < 0x21 || c == 0x7f || c == '?' || c == '#' || c == '%' || c == '\\' {
			return false
		}
	}
	return true
}
