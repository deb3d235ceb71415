package porcelain

import (
	"strings"
)

// SplitIgnored separates a `status --porcelain=v1 -z --ignored` output
// into the rest of it and the ignored paths ("!! path" entries).
func SplitIgnored(status string) (rest string, ignored []string) {
	if !strings.Contains(status, "!! ") {
		return status, nil
	}
	var b strings.Builder
	for _, e := range strings.Split(status, "\x00") {
		if p, ok := strings.CutPrefix(e, "!! "); ok {
			ignored = append(ignored, p)
		} else if e != "" {
			b.WriteString(e)
			b.WriteByte(0)
		}
	}
	return b.String(), ignored
}

// UntrackedDirs returns the directories of a `status --porcelain=v1 -z
// --untracked-files=all` output: with every untracked file listed one by
// one, git lists a directory ("?? dir/") only when it is a repository of
// its own, which it does not look into.
func UntrackedDirs(status string) []string {
	var dirs []string
	for _, e := range strings.Split(status, "\x00") {
		if p, ok := strings.CutPrefix(e, "?? "); ok && strings.HasSuffix(p, "/") {
			dirs = append(dirs, strings.TrimSuffix(p, "/"))
		}
	}
	return dirs
}
