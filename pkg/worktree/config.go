package worktree

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
)

// ContainerGitConfig returns the git settings the container's environment
// must carry (as GIT_CONFIG_COUNT / GIT_CONFIG_KEY_n / GIT_CONFIG_VALUE_n),
// so nothing inside the container prunes or garbage-collects the shared
// repository's worktree metadata: gc.auto=0 (no automatic gc, which would
// run `git worktree prune`), gc.worktreePruneExpire=never (even an explicit
// gc keeps worktree registrations) and maintenance.auto=false (no
// background maintenance after commands). The agent runs as a uid of its
// own while the user owns the repository, so its git would refuse the
// user's tree ("dubious ownership"): safe.directory=* lets it, and git
// honours safe.directory in this command scope (GIT_CONFIG_*), never from
// a repository's own config (package gitboundary). The slice is fresh on
// each call.
func ContainerGitConfig() [][2]string {
	return [][2]string{
		{"safe.directory", "*"},
		{"gc.auto", "0"},
		{"gc.worktreePruneExpire", "never"},
		{"maintenance.auto", "false"},
	}
}

// configEntry is one entry of `git config -z --get-regexp` output.
type configEntry struct {
	Key   string
	Value string
	// HasValue is false for a key written without "=" (a bare boolean).
	HasValue bool
}

// parseConfigList parses the output of `git config -z --get-regexp` (or
// `--list -z`): entries terminated by NUL, each "key\nvalue" or, for a
// valueless key, "key".
func parseConfigList(b []byte) ([]configEntry, error) {
	var out []configEntry
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return nil, fmt.Errorf("parse git config output: entry %q is not NUL-terminated", truncate(string(b), 64))
		}
		item := b[:i]
		b = b[i+1:]
		e := configEntry{}
		if j := bytes.IndexByte(item, '\n'); j >= 0 {
			e.Key, e.Value, e.HasValue = string(item[:j]), string(item[j+1:]), true
		} else {
			e.Key = string(item)
		}
		if e.Key == "" {
			return nil, fmt.Errorf("parse git config output: empty key")
		}
		out = append(out, e)
	}
	return out, nil
}

// filterDrivers returns the sorted, distinct driver names of filter.<name>.<var>
// keys. The subsection is everything between the first and the last dot and
// keeps its case (git lower-cases only the section and the variable).
func filterDrivers(entries []configEntry) []string {
	seen := map[string]bool{}
	for _, e := range entries {
		section, rest, ok := strings.Cut(e.Key, ".")
		if !ok || !strings.EqualFold(section, "filter") {
			continue
		}
		dot := strings.LastIndexByte(rest, '.')
		if dot <= 0 { // "filter.clean": no subsection, not a driver
			continue
		}
		seen[rest[:dot]] = true
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
