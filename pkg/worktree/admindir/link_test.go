package admindir

import (
	"path/filepath"
	"strings"
	"testing"
)

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
		parse, name := ParseGitdir, "ParseGitdir"
		if tc.dotGit {
			parse, name = ParseDotGit, "ParseDotGit"
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
		for _, parse := range []func([]byte, string) (string, error){ParseDotGit, ParseGitdir} {
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
