package porcelain

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSplitIgnored(t *testing.T) {
	tests := []struct {
		name, in, rest string
		ignored        []string
	}{
		{"none", "?? a\x00 M b\x00", "?? a\x00 M b\x00", nil},
		{"some", "?? a\x00!! build/out\x00 M b\x00!! .env\x00", "?? a\x00 M b\x00", []string{"build/out", ".env"}},
		{"only ignored", "!! x\x00", "", []string{"x"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rest, ignored := SplitIgnored(tc.in)
			if rest != tc.rest {
				t.Errorf("SplitIgnored(%q) rest = %q, want %q", tc.in, rest, tc.rest)
			}
			if diff := cmp.Diff(tc.ignored, ignored); diff != "" {
				t.Errorf("SplitIgnored(%q) ignored mismatch (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestUntrackedDirs(t *testing.T) {
	in := "?? file\x00?? nested/\x00 M tracked/\x00?? a/b/\x00!! ignored/\x00"
	want := []string{"nested", "a/b"}
	if diff := cmp.Diff(want, UntrackedDirs(in)); diff != "" {
		t.Errorf("UntrackedDirs(%q) mismatch (-want +got):\n%s", in, diff)
	}
}
