package mountplan

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// TestPinPointersBound: a plan that would need more than maxMounts mounts
// is refused, saying why, rather than leaving a pointer unfixed.
func TestPinPointersBound(t *testing.T) {
	root := testenv.TempDir(t)
	var ptrs []Mount
	for i := 0; i < maxMounts/2+1; i++ {
		d := filepath.Join(root, "d"+strconv.Itoa(i), "sub")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		ptrs = append(ptrs, Mount{Source: d, Target: d, ReadOnly: true})
	}
	_, err := Pin([]Mount{{Source: root, Target: root}}, ptrs)
	if !errors.Is(err, ErrInvalidWorktree) || !strings.Contains(err.Error(), "more than "+strconv.Itoa(maxMounts)) {
		t.Errorf("Pin(%d pointers in as many directories) = %v, want a refusal naming the bound", len(ptrs), err)
	}
	got, err := Pin([]Mount{{Source: root, Target: root}}, ptrs[:10])
	if err != nil || len(got) != 21 {
		t.Errorf("Pin(10 pointers) = %d mounts, %v; want 21", len(got), err)
	}
}
