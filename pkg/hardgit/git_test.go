package hardgit

import (
	"testing"
)

func TestParseGitVersion(t *testing.T) {
	tests := []struct {
		in   string
		want [3]int
		ok   bool
	}{
		{"git version 2.39.5", [3]int{2, 39, 5}, true},
		{"git version 2.39.3 (Apple Git-146)", [3]int{2, 39, 3}, true},
		{"git version 2.45.2.windows.1", [3]int{2, 45, 2}, true},
		{"git version 2.40.rc0", [3]int{2, 40, 0}, true},
		{"git version 2", [3]int{}, false},
		{"hub version 2.14", [3]int{}, false},
		{"", [3]int{}, false},
	}
	for _, tc := range tests {
		got, err := ParseVersion(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if !VersionLess([3]int{2, 35, 9}, MinVersion) || VersionLess([3]int{2, 39, 0}, MinVersion) {
		t.Errorf("VersionLess does not order versions around %v", MinVersion)
	}
}

func TestMayRunFilters(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"rev-parse", "HEAD"}, false},
		{[]string{"update-ref", "-d", "refs/x"}, false},
		{[]string{"commit-tree", "-m", "x", "abc"}, false},
		{[]string{"worktree", "list", "--porcelain", "-z"}, false},
		{[]string{"worktree", "add", "--no-checkout", "/p", "abc"}, false},
		{[]string{"worktree", "add", "/p", "abc"}, true},
		{[]string{"worktree", "remove", "--force", "/p"}, false}, // --force: no clean check, no content read
		{[]string{"worktree", "remove", "/p"}, true},
		{[]string{"hash-object", "-t", "tree", "--stdin"}, false},
		{[]string{"hash-object", "--stdin", "--path", "a.txt"}, true},
		{[]string{"ls-files", "--stage", "-z"}, false}, // the index only
		{[]string{"ls-files", "-z", "--others", "--exclude-standard"}, true},
		{[]string{"ls-files", "--stage", "--modified"}, true},
		{[]string{"ls-files"}, false},
		{[]string{"write-tree"}, true},
		{[]string{"add", "--all"}, true},
		{[]string{"reset", "--hard"}, true},
		{[]string{"some-future-command"}, true},
		{nil, true},
	}
	for _, tc := range tests {
		if got := mayRunFilters(tc.args); got != tc.want {
			t.Errorf("mayRunFilters(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
