package worktree

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ohd-dev/ohd/internal/testenv"
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

// TestParseWorktreeListRealGit parses what the installed git prints,
// including a lock reason with a newline and a prunable entry of the kind
// the original bug produced.
func TestParseWorktreeListRealGit(t *testing.T) {
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	tmp := testenv.TempDir(t)
	locked, gone := filepath.Join(tmp, "locked"), filepath.Join(tmp, "gone")
	gitIn(t, dir, "worktree", "add", "-q", "--detach", locked)
	gitIn(t, dir, "worktree", "lock", "--reason", "line one\nline two", locked)
	gitIn(t, dir, "worktree", "add", "-q", "-b", "g", gone)
	// As if created inside a container: the gitdir points to a path the
	// host does not have.
	testenv.WriteFile(t, filepath.Join(dir, ".git", "worktrees", "gone", "gitdir"), "/tmp/conversation-worktrees/x/workspace/.git\n")
	head := gitIn(t, dir, "rev-parse", "HEAD")

	m := newManager(t)
	got, err := m.Registrations(testCtx(t), dir)
	if err != nil {
		t.Fatalf("Registrations: %v", err)
	}
	want := []Registration{
		{Path: dir, Head: head, Branch: "refs/heads/main"},
		{Path: "/tmp/conversation-worktrees/x/workspace", Head: head, Branch: "refs/heads/g", Prunable: true, PrunableReason: "gitdir file points to non-existent location"},
		{Path: locked, Head: head, Detached: true, Locked: true, LockReason: "line one\nline two"},
	}
	byPath := cmpopts.SortSlices(func(a, b Registration) bool { return a.Path < b.Path }) // git lists admin dirs in readdir order
	if diff := cmp.Diff(want, got, byPath); diff != "" {
		t.Errorf("Registrations mismatch (-want +got):\n%s", diff)
	}
	// The common dir works as the argument too.
	got2, err := m.Registrations(testCtx(t), filepath.Join(dir, ".git"))
	if err != nil || !cmp.Equal(got, got2) {
		t.Errorf("Registrations(common dir) = %+v, %v; want the same as for the work tree", got2, err)
	}
	if _, err := m.Registrations(testCtx(t), testenv.TempDir(t)); !errors.Is(err, ErrNotGit) {
		t.Errorf("Registrations(plain dir) = %v, want ErrNotGit", err)
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

func TestParseGitdirFiles(t *testing.T) {
	tests := []struct {
		in, base, want string
		dotGit, ok     bool
	}{
		{"gitdir: /r/.git/worktrees/x\n", "/w", "/r/.git/worktrees/x", true, true},
		{"gitdir: ../../r/.git/worktrees/x\n", "/root/a/w", "/root/r/.git/worktrees/x", true, true}, // git >= 2.48 relative paths
		{"gitdir: /r/.git/worktrees/x\r\n", "/w", "/r/.git/worktrees/x", true, true},
		{"/r/.git/worktrees/x\n", "/w", "", true, false},
		{"gitdir: \n", "/w", "", true, false},
		{"gitdir: /a\nb\n", "/w", "", true, false},
		{"/w/.git\n", "/r/.git/worktrees/x", "/w/.git", false, true},
		{"../../../../w/.git\n", "/r/.git/worktrees/x", "/w/.git", false, true},
		{"/w/\x00.git", "/r", "", false, false},
		{"", "/r", "", false, false},
	}
	for _, tc := range tests {
		parse, name := parseAdminGitdir, "parseAdminGitdir"
		if tc.dotGit {
			parse, name = parseDotGit, "parseDotGit"
		}
		got, err := parse([]byte(tc.in), tc.base)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s(%q, %q) = %q, %v; want %q (ok %v)", name, tc.in, tc.base, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseGitdirFile(f *testing.F) {
	f.Add([]byte("gitdir: /r/.git/worktrees/x\n"), "/w")
	f.Add([]byte("gitdir: ../r/.git/worktrees/x\n"), "/a/w")
	f.Add([]byte("/w/.git\n"), "/r/.git/worktrees/x")
	f.Fuzz(func(t *testing.T, b []byte, base string) {
		for _, parse := range []func([]byte, string) (string, error){parseDotGit, parseAdminGitdir} {
			p, err := parse(b, base)
			if err != nil {
				continue
			}
			if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsAny(p, "\x00\n\r") {
				t.Fatalf("parse(%q, %q) = %q: not a clean absolute path", b, base, p)
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
