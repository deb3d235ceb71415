package porcelain

import (
	"strings"
)

// Gitlinks returns the paths of the gitlinks (mode 160000: submodule
// entries) in the output of `git ls-tree -r -z` or `git ls-files --stage
// -z`: entries "<mode> <...>\t<path>", each ended by NUL.
func Gitlinks(out string) []string {
	var paths []string
	for _, e := range strings.Split(out, "\x00") {
		if meta, p, ok := strings.Cut(e, "\t"); ok && strings.HasPrefix(meta, "160000 ") {
			paths = append(paths, p)
		}
	}
	return paths
}

// ChangedGitlinks returns the paths whose new mode is a gitlink (160000)
// in the output of `git diff-tree -r -z`.
func ChangedGitlinks(out string) []string {
	var paths []string
	// ":<old mode> <new mode> <old> <new> <status>\x00<path>\x00"
	f := strings.Split(out, "\x00")
	for i := 0; i+1 < len(f); i += 2 {
		meta := strings.Fields(strings.TrimPrefix(f[i], ":"))
		if len(meta) >= 2 && meta[1] == "160000" {
			paths = append(paths, f[i+1])
		}
	}
	return paths
}
