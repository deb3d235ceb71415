package broker

import (
	"strings"

	"github.com/ohd-dev/ohd/pkg/gitproto"
)

// OpenHandsBranches is where conversations' branches live on a git host:
// by default a push through the relay may create branches under it, and
// update those that are its own (pushPolicy).
const OpenHandsBranches = "refs/heads/openhands/"

// pushPolicy decides each ref update of a push through the git relay.
// The broker sees receive-pack's commands (old id, new id, ref), not the
// history between the ids, so it cannot tell a fast-forward from a force
// push: it decides on ownership. By default a conversation may
//
//   - create and update refs/heads/openhands/<its id> and every ref below
//     it (its own name);
//   - create a branch under refs/heads/openhands/ that does not exist yet
//     (old id zero: the host refuses it if the branch exists), unless its
//     first component has the form of a conversation id (another
//     conversation's name); a creation the host reports done makes the
//     branch one "it created" (RecordGitBranches, per host and
//     repository path);
//   - update the branches it created.
//
// Any other update (a force push over another conversation's branch, or
// over one a conversation since deleted created) is refused. A grant's
// Push patterns (ohctl grant --push) let a push also create or update
// any ref they match, as they always did. Deleting a ref and moving an
// existing tag are never allowed.
type pushPolicy struct {
	id       string   // the conversation
	grant    string   // the grant a hint names
	patterns []string // the matching grants' Push patterns
	// creators maps each ref under OpenHandsBranches that the push
	// updates to the conversation that created it, if one did.
	creators map[string]string
}

// own reports whether ref is the conversation's own name:
// refs/heads/openhands/<id> or below it.
func (p *pushPolicy) own(ref string) bool {
	name, ok := strings.CutPrefix(ref, OpenHandsBranches)
	if !ok {
		return false
	}
	rest, ok := strings.CutPrefix(name, p.id)
	return ok && (rest == "" || rest[0] == '/')
}

// othersName reports whether ref is under OpenHandsBranches with a first
// component shaped like a conversation id that is not this one's.
func (p *pushPolicy) othersName(ref string) bool {
	name, ok := strings.CutPrefix(ref, OpenHandsBranches)
	if !ok {
		return false
	}
	first, _, _ := strings.Cut(name, "/")
	return first != p.id && idShaped(first)
}

// needsCreator reports whether cmd's verdict depends on who created its
// ref (GitBranchCreators is asked for those).
func (p *pushPolicy) needsCreator(cmd gitproto.Command) bool {
	return !cmd.IsCreate() && !cmd.IsDelete() && strings.HasPrefix(cmd.Ref, OpenHandsBranches) && !p.own(cmd.Ref)
}

// check returns "" if cmd is allowed, else the reason git shows, and
// whether the host's success would make the ref one this conversation
// created.
func (p *pushPolicy) check(cmd gitproto.Command) (reason string, record bool) {
	ref := cmd.Ref
	openhands := strings.HasPrefix(ref, OpenHandsBranches)
	switch {
	case cmd.IsDelete():
		return "ohd: deleting " + ref + " is never granted", false
	case strings.HasPrefix(ref, "refs/tags/") && !cmd.IsCreate():
		return "ohd: moving the existing tag " + ref + " is never granted", false
	case p.own(ref):
		return "", false
	case matchAny(p.patterns, ref):
		return "", openhands && cmd.IsCreate() && !p.othersName(ref)
	case !openhands:
		return "ohd: pushing " + ref + " is not granted; " + p.hint(ref), false
	case cmd.IsCreate() && p.othersName(ref):
		return "ohd: " + ref + " is named for another conversation; push to " + OpenHandsBranches + p.id + " or a branch of another name", false
	case cmd.IsCreate():
		return "", true
	case p.creators[ref] == p.id:
		return "", false
	}
	return "ohd: " + ref + " is not this conversation's branch: it may update " + OpenHandsBranches + p.id + ", the refs below it and the branches it created; " + p.hint(ref), false
}

func (p *pushPolicy) hint(ref string) string {
	return "ohctl grant " + p.id + " git " + p.grant + " --push '" + ref + "'"
}

// idShaped reports whether s has the form of a conversation id: a UUID
// (8-4-4-4-12 hex digits, either case, so that a name differing from an
// id in case only is another conversation's too).
func idShaped(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
