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
