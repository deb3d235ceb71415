package testenv_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
)

// TestWedgedContainerHangsTheEngine proves the fixture does what the
// tests of issue 27 rely on: while the container is wedged, exec, inspect
// and rm on it get no answer (each given 3 s here), the engine still
// lists it (other calls answer); after Release it is gone.
func TestWedgedContainerHangsTheEngine(t *testing.T) {
	image := testimage.Ensure(t)
	w := testenv.StartWedged(t, image)
	for _, args := range [][]string{
		{"exec", w.ID, "true"},
		{"inspect", w.ID},
		{"rm", "-f", w.ID},
	} {
		out, err := testenv.Docker(3*time.Second, args...)
		if err == nil || !strings.Contains(err.Error(), "no answer within") {
			t.Errorf("docker %s on a wedged container = %q, %v; want no answer", args[0], out, err)
		}
	}
	out, err := testenv.Docker(30*time.Second, "ps", "-a", "-q", "--no-trunc", "--filter", "label="+testenv.WedgeLabel)
	if err != nil || !strings.Contains(out, w.ID) {
		t.Errorf("docker ps while wedged = %q, %v; want it listed", out, err)
	}
	w.Release()
	if out, err := testenv.Docker(30*time.Second, "ps", "-a", "-q", "--no-trunc", "--filter", "id="+w.ID); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("after Release docker ps = %q, %v; want the container gone", out, err)
	}
}

// TestSweepSparesTheWedgedContainersOfLiveRuns: go test runs packages in
// parallel, each may keep a wedged container; a sweep removes only those
// whose test process is gone.
func TestSweepSparesTheWedgedContainersOfLiveRuns(t *testing.T) {
	image := testimage.Ensure(t)
	testenv.RequireLocalEngine(t)
	ids := map[string]string{}
	for what, owner := range map[string]string{"live": testenv.WedgeOwner(), "dead": "999999999 1", "unlabelled": ""} {
		args := []string{"create", "--label", testenv.WedgeLabel + "=1", "--network", "none", "--entrypoint", "/bin/sh"}
		if owner != "" {
			args = append(args, "--label", testenv.WedgeOwnerLabel+"="+owner)
		}
		out, err := testenv.Docker(time.Minute, append(args, image, "-c", "true")...)
		if err != nil {
			t.Fatal(err)
		}
		id := strings.TrimSpace(out)
		ids[what] = id
		t.Cleanup(func() { _, _ = testenv.Docker(time.Minute, "rm", "-f", id) })
	}
	testenv.SweepWedged(t)
	for what, id := range ids {
		out, err := testenv.Docker(30*time.Second, "ps", "-a", "-q", "--no-trunc", "--filter", "id="+id)
		if err != nil {
			t.Fatal(err)
		}
		if there, want := strings.TrimSpace(out) != "", what == "live"; there != want {
			t.Errorf("the %s run's container: still there %v after the sweep, want %v", what, there, want)
		}
	}
}
