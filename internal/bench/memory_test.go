package bench

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
)

// TestMemoryBench runs the memory benchmark as make bench does, with 3
// live conversations instead of 50.
func TestMemoryBench(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: it runs the benchmark for a moment")
	}
	testenv.RequireDocker(t)
	res, err := Memory(context.Background(), MemoryOptions{Image: testimage.Ensure(t), Live: 3, Settle: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Detail())
	if res.Live != 3 || res.One <= 0 || res.All <= 0 {
		t.Errorf("Memory() = %+v, want both readings", res)
	}
	if !regexp.MustCompile(`^bench: memory-per-conversation kib=-?[0-9]+ live=3 rss_kib=[0-9]+$`).MatchString(res.Line()) {
		t.Errorf("Line() = %q, want the documented form", res.Line())
	}
	if rows := MemoryRows(res); len(rows) != 1 || rows[0].Name != "memory-per-conversation" {
		t.Errorf("MemoryRows() = %+v", rows)
	}
}
