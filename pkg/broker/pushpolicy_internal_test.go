package broker

import (
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/pkg/gitproto"
)

// TestPushPolicy: the relay's push policy, command by command, for
// conversation A; B and a deleted conversation D made other branches.
func TestPushPolicy(t *testing.T) {
	const (
		a    = "0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1b"
		b    = "7d1c2b3a-4e5f-4a6b-9c7d-8e9f0a1b2c3d"
		d    = "11111111-2222-4333-8444-555555555555"
		zero = "0000000000000000000000000000000000000000"
		x    = "1111111111111111111111111111111111111111"
		y    = "2222222222222222222222222222222222222222"
		oh   = "refs/heads/openhands/"
	)
	creators := map[string]string{oh + "a-made": a, oh + "b-made": b, oh + "d-made": d}
	create := func(ref string) gitproto.Command { return gitproto.Command{Old: zero, New: x, Ref: ref} }
	update := func(ref string) gitproto.Command { return gitproto.Command{Old: x, New: y, Ref: ref} }
	del := func(ref string) gitproto.Command { return gitproto.Command{Old: x, New: zero, Ref: ref} }
	for _, c := range []struct {
		name     string
		patterns []string
		cmd      gitproto.Command
		want     string // "" allowed, else a part of the reason
		record   bool
	}{
		{"create own", nil, create(oh + a), "", false},
		{"update own", nil, update(oh + a), "", false},
		{"create below own", nil, create(oh + a + "/fix"), "", false},
		{"update below own", nil, update(oh + a + "/fix"), "", false},
		{"create a new branch", nil, create(oh + "feature"), "", true},
		{"create a new branch starting like its id", nil, create(oh + a + "x"), "", true},
		{"update a branch it created", nil, update(oh + "a-made"), "", false},
		{"update a branch it did not create", nil, update(oh + "nobody-made"), "is not this conversation's branch", false},
		{"update a name starting like its id", nil, update(oh + a + "x"), "is not this conversation's branch", false},
		{"update another conversation's branch", nil, update(oh + b), "ohd: " + oh + b + " is not this conversation's branch: it may update " + oh + a + ",", false},
		{"update below another conversation's branch", nil, update(oh + b + "/fix"), "is not this conversation's branch", false},
		{"update a branch another conversation created", nil, update(oh + "b-made"), "is not this conversation's branch", false},
		{"update a branch a deleted conversation created", nil, update(oh + "d-made"), "is not this conversation's branch", false},
		{"create another conversation's branch", nil, create(oh + b), "is named for another conversation", false},
		{"create below another conversation's branch", nil, create(oh + b + "/x"), "is named for another conversation", false},
		{"create another's id in upper case", nil, create(oh + strings.ToUpper(b)), "is named for another conversation", false},
		{"delete own", nil, del(oh + a), "ohd: deleting " + oh + a + " is never granted", false},
		{"delete a branch it created", nil, del(oh + "a-made"), "is never granted", false},
		{"delete with a pattern", []string{"refs/heads/*"}, del("refs/heads/x"), "is never granted", false},
		{"push main", nil, update("refs/heads/main"), "ohd: pushing refs/heads/main is not granted; ohctl grant " + a + " git github.com/acme --push 'refs/heads/main'", false},
		{"create a branch outside openhands/", nil, create("refs/heads/feature"), "is not granted", false},
		{"the bare prefix", nil, create("refs/heads/openhands"), "is not granted", false},
		{"create a tag", nil, create("refs/tags/v2"), "ohd: pushing refs/tags/v2 is not granted", false},
		{"create a tag with a pattern", []string{"refs/tags/*"}, create("refs/tags/v2"), "", false},
		{"move a tag with a pattern", []string{"refs/tags/*"}, update("refs/tags/v1"), "moving the existing tag refs/tags/v1 is never granted", false},
		{"widened: update main", []string{"refs/heads/main"}, update("refs/heads/main"), "", false},
		{"widened: create a feature branch", []string{"refs/heads/feature/*"}, create("refs/heads/feature/x"), "", false},
		{"widened: update another conversation's branch", []string{oh + "*"}, update(oh + b), "", false},
		{"widened: create another conversation's name, not recorded", []string{oh + "*"}, create(oh + b), "", false},
		{"widened: create a new branch, recorded", []string{oh + "*"}, create(oh + "feature"), "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := pushPolicy{id: a, grant: "github.com/acme", patterns: c.patterns}
			if p.needsCreator(c.cmd) {
				p.creators = creators
			}
			reason, record := p.check(c.cmd)
			if c.want == "" && reason != "" || c.want != "" && !strings.Contains(reason, c.want) {
				t.Errorf("check(%s %s) = %q, want %q", c.cmd.Old[:1], c.cmd.Ref, reason, c.want)
			}
			if record != c.record {
				t.Errorf("check(%s) records %v, want %v", c.cmd.Ref, record, c.record)
			}
		})
	}
}

func TestIDShaped(t *testing.T) {
	for s, want := range map[string]bool{
		"0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1b":  true,
		"0B9F6A1E-3C2D-4E5F-8A7B-6C5D4E3F2A1B":  true,
		"0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1":   false,
		"0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1bx": false,
		"0b9f6a1e_3c2d-4e5f-8a7b-6c5d4e3f2a1b":  false,
		"0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1g":  false,
		"feature":                               false,
	} {
		if got := idShaped(s); got != want {
			t.Errorf("idShaped(%q) = %v, want %v", s, got, want)
		}
	}
}
