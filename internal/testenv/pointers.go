package testenv

import "testing"

// The pointer attacks (issue 26): when the user's git recurses into a
// submodule it sets GIT_DIR for the child and skips its ownership check,
// so what it follows there (each submodule's .git, each submodule's
// directory and every directory above it, an unpopulated submodule's
// directory, a linked worktree's .git) must stay the user's. The unit
// tests of pkg/worktree (in a mount namespace carrying the plan's mounts)
// and the integration tests (from inside the conversation's container)
// run the same attacks on the same layout.

// PointerRepo makes dir (and its parents) a repository on main with
// submodules: sub (checked out, with its own submodule deep, not checked
// out), a/b/lib (checked out, two directories down, with deep too) and
// vendor/x (not checked out: deinit).
func PointerRepo(t testing.TB, dir string) {
	t.Helper()
	deep := NewRepo(t, RepoOptions{})
	inner := NewRepo(t, RepoOptions{})
	git := func(dir string, args ...string) {
		Git(t, dir, append([]string{"-c", "safe.directory=*", "-c", "protocol.file.allow=always"}, args...)...)
	}
	git(inner, "submodule", "add", "-q", deep, "deep")
	git(inner, "commit", "-q", "-m", "deep")
	InitRepo(t, dir, "main")
	for _, p := range []string{"sub", "a/b/lib", "vendor/x"} {
		git(dir, "submodule", "add", "-q", inner, p)
	}
	git(dir, "commit", "-q", "-m", "submodules")
	git(dir, "submodule", "deinit", "-q", "-f", "vendor/x")
}

// PointerAttack is one way the agent could make the user's git run its
// program through a submodule: Script (sh, run as the agent in the work
// tree) plants a repository whose core.fsmonitor touches $MARKERS/<Name>,
// and the user's `git status` at the work tree's root runs it unless a
// fixed pointer stops the script.
type PointerAttack struct{ Name, Script string }

// PointerAttacks are the attacks on PointerRepo's layout, in an order
// where each leaves what the next needs: plants first, then moves, the
// work tree's own .git last. checkedOut is for the repository itself (in
// place, a plain folder: sub and a/b/lib populated), !checkedOut for a
// fresh linked worktree (no submodule populated, its .git a file, which
// the last attack points at a repository the agent makes at evil, a path
// relative to the work tree).
func PointerAttacks(checkedOut bool, evil string) []PointerAttack {
	plant := func(p, name string) string {
		return "git init -q " + p + " && git -C " + p + " config core.fsmonitor \"touch $MARKERS/" + name + "; false\""
	}
	moved := func(p, name string) string {
		return "mv " + p + " " + p + ".moved && mkdir -p " + p + " && " + plant(p, name)
	}
	var as []PointerAttack
	if checkedOut {
		as = append(as,
			PointerAttack{"init-sub-deep", plant("sub/deep", "init-sub-deep")},
			PointerAttack{"init-lib-deep", plant("a/b/lib/deep", "init-lib-deep")},
			PointerAttack{"sub-dotgit", "rm -f sub/.git && " + plant("sub", "sub-dotgit")},
			PointerAttack{"move-sub", moved("sub", "move-sub")},
		)
	} else {
		as = append(as,
			PointerAttack{"init-sub", plant("sub", "init-sub")},
			PointerAttack{"init-lib", plant("a/b/lib", "init-lib")},
		)
	}
	as = append(as,
		PointerAttack{"init-vendor-x", plant("vendor/x", "init-vendor-x")},
		PointerAttack{"move-vendor", "mv vendor vendor.moved && mkdir -p vendor/x && " + plant("vendor/x", "move-vendor")},
		PointerAttack{"move-a", "mv a a.moved && mkdir -p a/b/lib && " + plant("a/b/lib", "move-a")},
	)
	if !checkedOut {
		as = append(as, PointerAttack{"dotgit", plant(evil, "dotgit") + " && printf 'gitdir: %s\\n' \"$(cd " + evil + " && pwd)/.git\" > .git"})
	}
	return as
}
