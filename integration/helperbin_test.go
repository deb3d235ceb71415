package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestBackendStoppedConversationStartsAfterTheOhctlBinaryIsGone: the ohctl that
// containers mount is a copy ohd owns, by content hash, in its state
// directory; `make clean` (the --ohctl-binary deleted) after a
// conversation stopped does not keep it from starting again.
func TestBackendStoppedConversationStartsAfterTheOhctlBinaryIsGone(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		bin := filepath.Join(testenv.TempDir(t), "ohctl")
		data, err := os.ReadFile(binaries(t).ohctl)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
		d := b.daemon(t, "--ohctl-binary", bin)
		id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": testenv.NewRepo(t, testenv.RepoOptions{})}})
		c := d.record(id)
		if got := b.workload(t, c.ContainerID).Mounts["/run/ohd/bin/ohctl"].Source; filepath.Dir(got) != filepath.Join(d.dirs.State, "bin") || !strings.HasPrefix(filepath.Base(got), "ohctl-") {
			t.Errorf("the container mounts ohctl from %q, want a copy in %s", got, filepath.Join(d.dirs.State, "bin"))
		}

		b.crash(t, c.ContainerID)
		waitForState(t, d, id, store.StateStopped, 30*time.Second)
		if err := os.Remove(bin); err != nil { // make clean
			t.Fatal(err)
		}
		// Any forwarded request starts it again.
		if r := d.call("GET", "/api/conversations/"+id+"/events/search", nil); r.Status >= 500 {
			t.Fatalf("a request to the stopped conversation after the binary was removed = %d %s", r.Status, r.Body)
		}
		if got := d.record(id); got.State != store.StateRunning {
			t.Errorf("state after the request = %s, want running", got.State)
		}
		if code, out := d.execIn(id, "/run/ohd/bin/ohctl", "version"); !strings.HasPrefix(out, "ohctl ") {
			t.Errorf("the mounted ohctl after the restart: %d %q, want its version line", code, out)
		}
	})
}
