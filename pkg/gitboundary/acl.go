package gitboundary

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// The kernel's POSIX ACL extended attributes (include/uapi/linux/
// posix_acl_xattr.h): a little-endian header (version 2) followed by
// entries of tag (u16), permission (u16) and id (u32), sorted by tag and
// then id. Written through setxattr, a minimal access ACL (owner, group,
// other only) is folded into the mode bits and the attribute removed.
const (
	xattrAccess  = "system.posix_acl_access"
	xattrDefault = "system.posix_acl_default"

	aclVersion = 2

	tagUserObj  = 0x01
	tagUser     = 0x02
	tagGroupObj = 0x04
	tagGroup    = 0x08
	tagMask     = 0x10
	tagOther    = 0x20

	undefinedID = 0xFFFFFFFF

	permR = 4
	permW = 2
	permX = 1
)

// aclEntry is one entry of an ACL.
type aclEntry struct {
	tag  uint16
	perm uint16
	id   uint32
}

// acl is an ACL's entries, in any order (encode sorts them).
type acl []aclEntry

// errBadACL is an attribute that is not a version 2 ACL.
var errBadACL = errors.New("not a POSIX ACL attribute")

func decodeACL(b []byte) (acl, error) {
	if len(b) < 4 || (len(b)-4)%8 != 0 || binary.LittleEndian.Uint32(b) != aclVersion {
		return nil, errBadACL
	}
	var a acl
	for p := b[4:]; len(p) > 0; p = p[8:] {
		a = append(a, aclEntry{tag: binary.LittleEndian.Uint16(p), perm: binary.LittleEndian.Uint16(p[2:]), id: binary.LittleEndian.Uint32(p[4:])})
	}
	return a, nil
}

func (a acl) encode() []byte {
	s := slices.Clone(a)
	slices.SortFunc(s, func(x, y aclEntry) int {
		if x.tag != y.tag {
			return int(x.tag) - int(y.tag)
		}
		switch {
		case x.id < y.id:
			return -1
		case x.id > y.id:
			return 1
		}
		return 0
	})
	b := make([]byte, 4, 4+8*len(s))
	binary.LittleEndian.PutUint32(b, aclVersion)
	for _, e := range s {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// get returns the first entry with tag (and id, for named entries).
func (a acl) get(tag uint16, id uint32) (aclEntry, bool) {
	for _, e := range a {
		if e.tag == tag && (tag != tagUser && tag != tagGroup || e.id == id) {
			return e, true
		}
	}
	return aclEntry{}, false
}

// shared is the ACL that lets both owner and agent use an inode: the base
// entries from mode (the group class is the mask when the inode already
// has an ACL, so the group entry of old is kept from old when there is
// one), named entries with perm for owner and agent, and a mask that
// grants them.
func shared(mode uint32, old acl, owner, agent uint32, perm uint16) acl {
	group := uint16(mode>>3) & 7
	if e, ok := old.get(tagGroupObj, 0); ok {
		group = e.perm
	}
	a := acl{
		{tag: tagUserObj, perm: uint16(mode>>6) & 7, id: undefinedID},
		{tag: tagGroupObj, perm: group, id: undefinedID},
		{tag: tagOther, perm: uint16(mode) & 7, id: undefinedID},
	}
	// Other named entries (the user's own) stay as they were.
	for _, e := range old {
		if (e.tag == tagUser && e.id != owner && e.id != agent) || e.tag == tagGroup {
			a = append(a, e)
		}
	}
	a = append(a, aclEntry{tag: tagUser, perm: perm, id: owner})
	if agent != owner {
		a = append(a, aclEntry{tag: tagUser, perm: perm, id: agent})
	}
	mask := perm | group
	for _, e := range a {
		if e.tag == tagUser || e.tag == tagGroup {
			mask |= e.perm
		}
	}
	return append(a, aclEntry{tag: tagMask, perm: mask, id: undefinedID})
}

// without returns a with the named user entries of owner and agent
// removed. When what is left is minimal (no named entries), the mask goes
// too and the group entry keeps only what the mask granted, so nobody gains
// a permission by the release. It reports whether anything was removed.
func (a acl) without(owner, agent uint32) (acl, bool) {
	var out acl
	removed := false
	for _, e := range a {
		if e.tag == tagUser && (e.id == owner || e.id == agent) {
			removed = true
			continue
		}
		out = append(out, e)
	}
	if !removed {
		return a, false
	}
	named := slices.ContainsFunc(out, func(e aclEntry) bool { return e.tag == tagUser || e.tag == tagGroup })
	if named {
		return out, true
	}
	mask, hasMask := out.get(tagMask, 0)
	var min acl
	for _, e := range out {
		switch e.tag {
		case tagMask:
			continue
		case tagGroupObj:
			if hasMask {
				e.perm &= mask.perm
			}
		}
		min = append(min, e)
	}
	return min, true
}

// minimal reports whether a holds only the owner, group and other entries.
func (a acl) minimal() bool {
	return !slices.ContainsFunc(a, func(e aclEntry) bool { return e.tag != tagUserObj && e.tag != tagGroupObj && e.tag != tagOther })
}

func (a acl) String() string {
	s := ""
	for _, e := range a {
		s += fmt.Sprintf("[%#x %o %d]", e.tag, e.perm, int32(e.id))
	}
	return s
}

// defaultACL is the default ACL of a shared directory: what is made in it
// gets the owner class from the directory's owner bits (rwx), the group
// and other classes without write (the group class from old's group entry,
// when it has one), a named entry rwx for the owner, and none for the
// agent (nor for its group). So what the agent makes there is the agent's
// (the owner entry) and the user's (the named entry), and what the user
// makes there (a directory, or a file an editor saves by rename) is not
// the agent's to write by any entry until ohd shares it: a directory the
// user owns is never one the agent can fill. Not by the group class
// either: an agent that owns the parent can give it its own group and the
// setgid bit, so that what the user makes there gets the agent's group.
// Other named entries of old (the user's own) are kept.
func defaultACL(mode uint32, old acl, ids IDs) acl {
	a := shared(mode|0o700, old, uint32(ids.Owner), uint32(ids.Owner), permR|permW|permX)
	a, _ = withoutAgent(a, ids)
	return a
}

// agentFree reports whether the default ACL def lets the agent write
// nothing the user makes under it: no named entry of the agent's or its
// group's, and no write for the group and other classes. A nil (absent)
// default ACL is not: new inodes then get their mode from the creator's
// umask alone.
func agentFree(def acl, ids IDs) bool {
	if def == nil {
		return false
	}
	for _, e := range def {
		switch {
		case e.tag == tagUser && e.id == uint32(ids.Agent), e.tag == tagGroup && e.id == uint32(ids.AgentGID):
			return false
		case (e.tag == tagOther || e.tag == tagGroupObj) && e.perm&permW != 0:
			return false
		}
	}
	return true
}

// withoutAgent is the default ACL def with the agent's (and its group's)
// named entries removed and write taken from the group and other classes
// (see defaultACL); changed says whether that changed anything.
func withoutAgent(def acl, ids IDs) (acl, bool) {
	if def == nil || agentFree(def, ids) {
		return def, false
	}
	var out acl
	for _, e := range def {
		switch {
		case e.tag == tagUser && e.id == uint32(ids.Agent), e.tag == tagGroup && e.id == uint32(ids.AgentGID):
			continue
		case e.tag == tagOther || e.tag == tagGroupObj:
			e.perm &^= permW
		}
		out = append(out, e)
	}
	return out, true
}
