package ohctl

import (
	"strings"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/store"
)

// gitGrantRoutes describes each git grant with the route git takes to
// it: "github.com/acme (relay; push its own branches under
// refs/heads/openhands/)", with ", and <patterns>" for --push patterns
// (the broker's push policy), or "github.com/acme (credential helper:
// the token enters the container)".
func gitGrantRoutes(g store.Grants) []string {
	out := make([]string, 0, len(g.Git))
	for _, name := range g.Git {
		opt := g.GitOptions[name]
		if opt.Helper {
			out = append(out, name+" (credential helper: the token enters the container)")
			continue
		}
		push := "its own branches under " + broker.OpenHandsBranches
		if len(opt.Push) > 0 {
			push += ", and " + strings.Join(opt.Push, " ")
		}
		out = append(out, name+" (relay; push "+push+")")
	}
	return out
}
