package hardgit

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// markerFile is where the stand-in programs of one test record their
// names, one per run.
type markerFile string

// program writes an executable stand-in called name that appends its name
// to the marker file; a filter stand-in passes its input through.
func (f markerFile) program(t *testing.T, name string, filter bool) string {
	t.Helper()
	pass := "cat >/dev/null 2>&1 </dev/null || true"
	if filter {
		pass = "cat"
	}
	p := filepath.Join(testenv.TempDir(t), name)
	testenv.WriteFile(t, p, "#!/bin/sh\necho "+name+" >> "+string(f)+"\n"+pass+"\n")
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// ran returns the names the stand-ins recorded, in order.
func (f markerFile) ran(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(string(f))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// TestEmptyFilterOverrideDisablesFilter checks, on the installed git, the
// mechanism the hardening relies on: a filter driver whose clean, smudge
// and process are overridden to empty (and required=false) runs nothing,
// while without the override it runs.
func TestEmptyFilterOverrideDisablesFilter(t *testing.T) {
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	e := markerFile(filepath.Join(testenv.TempDir(t), "fired"))
	testenv.Git(t, dir, "config", "filter.a=b.clean", e.program(t, "clean", true)) // a driver name with "="
	testenv.Git(t, dir, "config", "filter.a=b.smudge", e.program(t, "smudge", true))
	testenv.Git(t, dir, "config", "filter.a=b.required", "true")
	testenv.Git(t, dir, "config", "filter.P.process", e.program(t, "process", true))
	testenv.WriteFile(t, filepath.Join(dir, ".gitattributes"), "*.x filter=a=b\n*.p filter=P\n")

	run := func(env []string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, append(testenv.GitEnv(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	out := testenv.Git(t, dir, "config", "-z", "--get-regexp", `^filter\.`)
	entries, err := parseConfigList([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	drivers := filterDrivers(entries)
	if diff := cmp.Diff([]string{"P", "a=b"}, drivers); diff != "" {
		t.Fatalf("filterDrivers mismatch (-want +got):\n%s", diff)
	}
	off := ConfigEnv(disableFilters(drivers))

	testenv.WriteFile(t, filepath.Join(dir, "f.x"), "x\n")
	testenv.WriteFile(t, filepath.Join(dir, "f.p"), "p\n")
	run(off, "add", "f.x", "f.p")
	run(off, "commit", "-q", "-m", "filtered files")
	for _, f := range []string{"f.x", "f.p"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	run(off, "checkout", "--", "f.x", "f.p")
	if got := e.ran(t); len(got) != 0 {
		t.Errorf("with empty overrides git ran %q", got)
	}
	testenv.WriteFile(t, filepath.Join(dir, "f.x"), "changed\n")
	run(nil, "add", "f.x")
	if got := e.ran(t); !slices.Contains(got, "clean") {
		t.Errorf("without the overrides git ran %q, want the clean filter (the check above proves nothing otherwise)", got)
	}
}
