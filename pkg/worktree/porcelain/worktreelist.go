package porcelain

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// Registration is one entry of `git worktree list --porcelain -z`: a
// worktree as the repository records it.
type Registration struct {
	// Path is the worktree's directory as git reports it.
	Path string
	// Head is the commit checked out (empty for an unborn or bare entry).
	Head string
	// Branch is the full ref checked out ("refs/heads/main"), empty when
	// detached or bare.
	Branch string
	Bare   bool
	// Detached is true when HEAD is not a branch.
	Detached bool
	// Locked is true when the worktree is locked; LockReason is the reason
	// given, if any.
	Locked     bool
	LockReason string
	// Prunable is true when `git worktree prune` would delete the entry;
	// PrunableReason says why (e.g. "gitdir file points to non-existent
	// location").
	Prunable       bool
	PrunableReason string
}

// errPorcelain is wrapped by ParseWorktreeList errors.
var errPorcelain = errors.New("parse git worktree list --porcelain -z")

// ParseWorktreeList parses the output of `git worktree list --porcelain -z`:
// attributes terminated by NUL, each record ending with an empty attribute.
// Unknown attributes are ignored, so newer git versions parse too.
func ParseWorktreeList(b []byte) ([]Registration, error) {
	var (
		out []Registration
		cur *Registration
	)
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return nil, fmt.Errorf("%w: attribute %q is not NUL-terminated", errPorcelain, truncate(string(b), 64))
		}
		field := string(b[:i])
		b = b[i+1:]
		if field == "" {
			if cur == nil {
				return nil, fmt.Errorf("%w: empty record", errPorcelain)
			}
			out = append(out, *cur)
			cur = nil
			continue
		}
		key, val, hasVal := strings.Cut(field, " ")
		if cur == nil {
			if key != "worktree" || !hasVal || val == "" {
				return nil, fmt.Errorf("%w: record starts with %q, want \"worktree <path>\"", errPorcelain, truncate(field, 64))
			}
			cur = &Registration{Path: val}
			continue
		}
		switch key {
		case "worktree":
			return nil, fmt.Errorf("%w: record for %q is not terminated", errPorcelain, cur.Path)
		case "HEAD":
			cur.Head = val
		case "branch":
			cur.Branch = val
		case "bare":
			cur.Bare = true
		case "detached":
			cur.Detached = true
		case "locked":
			cur.Locked, cur.LockReason = true, val
		case "prunable":
			cur.Prunable, cur.PrunableReason = true, val
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%w: record for %q is not terminated (truncated output?)", errPorcelain, cur.Path)
	}
	return out, nil
}

// truncate shortens s, quoted in an error message, to n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
