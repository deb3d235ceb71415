package ohctl

import (
	"strings"

	"github.com/ohd-dev/ohd/pkg/store"
)

// gitGrantRoutes describes each git grant with the route git takes to
// it: "github.com/acme (relay; push refs/heads/openhands/*)" or
// "github.com/acme (credential helper: the token enters the container)".
func gitGrantRoutes(g store.Grants) []string {
	out := make([]string, 0, len(g.Git))
	for _, name := range g.Git {
		opt := g.GitOptions[name]
		if opt.Helper {
			out = append(out, name+" (credential helper: the token enters the container)")
			continue
		}
		push := append([]string{"refs/heads/openhands/*"}, opt.Push...)
		out = append(out, name+" (relay; push "+strings.Join(push, " ")+")")
	}
	return out
}
