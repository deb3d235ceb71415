package hardgit

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
)

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
			entry := string(b)
			if len(entry) > 64 {
				entry = entry[:64] + "..."
			}
			return nil, fmt.Errorf("parse git config output: entry %q is not NUL-terminated", entry)
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
