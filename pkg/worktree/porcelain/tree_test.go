package porcelain

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGitlinks(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
	}{
		{"empty", "", nil},
		{"ls-tree", "100644 blob aaa\tREADME\x00160000 commit bbb\tsub/mod\x00040000 tree ccc\tdir\x00", []string{"sub/mod"}},
		{"ls-files --stage", "100644 aaa 0\tREADME\x00160000 bbb 0\tvendor/x\x00160000 ccc 0\ta b\x00", []string{"vendor/x", "a b"}},
		{"no tab", "160000 bbb 0 sub\x00", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Gitlinks(tc.in)); diff != "" {
				t.Errorf("Gitlinks(%q) mismatch (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestChangedGitlinks(t *testing.T) {
	in := ":000000 160000 0000 bbbb A\x00sub\x00" +
		":100644 100644 aaaa cccc M\x00README\x00" +
		":160000 100644 dddd eeee T\x00was-sub\x00" +
		":160000 160000 ffff 1111 M\x00moved\x00"
	want := []string{"sub", "moved"}
	if diff := cmp.Diff(want, ChangedGitlinks(in)); diff != "" {
		t.Errorf("ChangedGitlinks(%q) mismatch (-want +got):\n%s", in, diff)
	}
	if got := ChangedGitlinks(":000000 160000 0000 bbbb A"); got != nil {
		t.Errorf("ChangedGitlinks(truncated) = %q, want none", got)
	}
}
