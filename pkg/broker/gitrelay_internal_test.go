package broker

import "testing"

func TestPushPatterns(t *testing.T) {
	for _, c := range []struct {
		p, ref string
		want   bool
	}{
		{"refs/heads/openhands/*", "refs/heads/openhands/x", true},
		{"refs/heads/openhands/*", "refs/heads/openhands/a/b", true},
		{"refs/heads/openhands/*", "refs/heads/openhands", false},
		{"refs/heads/openhands/*", "refs/heads/main", false},
		{"refs/heads/main", "refs/heads/main", true},
		{"refs/heads/main", "refs/heads/mainx", false},
		{"refs/heads/*-wip", "refs/heads/a/b-wip", true},
		{"refs/heads/*-wip", "refs/heads/a-wipx", false},
		{"refs/tags/v*", "refs/tags/v1.2", true},
	} {
		if got := globMatch(c.p, c.ref); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v", c.p, c.ref, got)
		}
	}
	for p, want := range map[string]bool{"refs/heads/feature/*": true, "refs/heads/main": true, "main": false, "refs/heads/../x": false, "refs/heads/a b": false, "": false} {
		if ValidPushPattern(p) != want {
			t.Errorf("ValidPushPattern(%q) = %v", p, !want)
		}
	}
}

func TestParseGitPath(t *testing.T) {
	ok := []string{
		"github.com/acme/w.git/info/refs GET service=git-upload-pack",
		"github.com/acme/w/info/refs GET service=git-receive-pack",
		"github.com:8443/a/w.git/git-upload-pack POST ",
		"127.0.0.1:5000/w.git/git-receive-pack POST ",
	}
	bad := []string{
		"github.com/info/refs GET service=git-upload-pack",
		"github.com/acme/w.git/info/refs POST service=git-upload-pack",
		"github.com/acme/w.git/git-upload-pack GET ",
		"github.com/acme/w.git/git-upload-pack POST x=1",
		"github.com/acme/w.git/HEAD GET ",
		"github.com/acme/%77.git/git-upload-pack POST ",
		"github.com/acme\\w.git/git-upload-pack POST ",
		"gith%75b.com/acme/w.git/git-upload-pack POST ",
		"github.com/acme/../w.git/git-upload-pack POST ",
		"bad host!/w.git/git-upload-pack POST ",
	}
	split := func(s string) (string, string, string) {
		var p, m, q string
		for i, f := range splitN(s) {
			switch i {
			case 0:
				p = f
			case 1:
				m = f
			case 2:
				q = f
			}
		}
		return p, m, q
	}
	for _, s := range ok {
		p, m, q := split(s)
		if _, good := parseGitPath(p, q, m); !good {
			t.Errorf("refused %q", s)
		}
	}
	for _, s := range bad {
		p, m, q := split(s)
		if _, good := parseGitPath(p, q, m); good {
			t.Errorf("accepted %q", s)
		}
	}
}

// splitN splits on the last two spaces (paths hold none that pass).
func splitN(s string) []string {
	i := lastSpace(s)
	j := lastSpace(s[:i])
	return []string{s[:j], s[j+1 : i], s[i+1:]}
}

func lastSpace(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ' ' {
			return i
		}
	}
	return -1
}
