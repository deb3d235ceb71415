package porcelain

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseWorktreeList(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Registration
		wantErr bool
	}{
		{"empty", "", nil, false},
		{"main only", "worktree /r\x00HEAD abc\x00branch refs/heads/main\x00\x00",
			[]Registration{{Path: "/r", Head: "abc", Branch: "refs/heads/main"}}, false},
		{"bare, detached, locked, prunable", "worktree /b\x00bare\x00\x00" +
			"worktree /w x\x00HEAD def\x00detached\x00locked\x00prunable gitdir file points to non-existent location\x00\x00" +
			"worktree /l\x00HEAD 123\x00branch refs/heads/x\x00locked ohd conversation\nwith a newline\x00unknown-attr 1\x00\x00",
			[]Registration{
				{Path: "/b", Bare: true},
				{Path: "/w x", Head: "def", Detached: true, Locked: true, Prunable: true, PrunableReason: "gitdir file points to non-existent location"},
				{Path: "/l", Head: "123", Branch: "refs/heads/x", Locked: true, LockReason: "ohd conversation\nwith a newline"},
			}, false},
		{"truncated record", "worktree /r\x00HEAD abc\x00", nil, true},
		{"not NUL-terminated", "worktree /r", nil, true},
		{"attribute before worktree", "HEAD abc\x00\x00", nil, true},
		{"empty record", "\x00", nil, true},
		{"empty path", "worktree \x00\x00", nil, true},
		{"unterminated record followed by another", "worktree /a\x00worktree /b\x00\x00", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseWorktreeList([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseWorktreeList(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, errPorcelain) {
				t.Errorf("ParseWorktreeList(%q) error %v does not wrap errPorcelain", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseWorktreeList(%q) mismatch (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func FuzzParseWorktreeList(f *testing.F) {
	f.Add([]byte("worktree /r\x00HEAD abc\x00branch refs/heads/main\x00\x00"))
	f.Add([]byte("worktree /w\x00HEAD def\x00detached\x00locked why\x00prunable gone\x00\x00worktree /b\x00bare\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		regs, err := ParseWorktreeList(b)
		if err != nil {
			return
		}
		again, err := ParseWorktreeList(formatWorktreeList(regs))
		if err != nil {
			t.Fatalf("re-parse of formatted %+v: %v", regs, err)
		}
		if !cmp.Equal(regs, again) {
			t.Fatalf("round trip changed the registrations:\n%s", cmp.Diff(regs, again))
		}
		for _, r := range regs {
			if r.Path == "" || strings.ContainsRune(r.Path, 0) {
				t.Fatalf("bad path %q accepted", r.Path)
			}
		}
	})
}

// formatWorktreeList is the inverse of ParseWorktreeList.
func formatWorktreeList(regs []Registration) []byte {
	var b bytes.Buffer
	attr := func(s string) { b.WriteString(s); b.WriteByte(0) }
	with := func(k, v string) string {
		if v == "" {
			return k
		}
		return k + " " + v
	}
	for _, r := range regs {
		attr("worktree " + r.Path)
		if r.Bare {
			attr("bare")
		}
		if r.Head != "" {
			attr("HEAD " + r.Head)
		}
		if r.Branch != "" {
			attr("branch " + r.Branch)
		}
		if r.Detached {
			attr("detached")
		}
		if r.Locked {
			attr(with("locked", r.LockReason))
		}
		if r.Prunable {
			attr(with("prunable", r.PrunableReason))
		}
		b.WriteByte(0)
	}
	return b.Bytes()
}
