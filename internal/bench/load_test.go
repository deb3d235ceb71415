package bench

import (
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
)

func TestPublishLoadBench(t *testing.T) {
	ctx, img := dockerBench(t)
	res, err := PublishLoad(ctx, PublishLoadOptions{Agents: 2, Extra: 2, Commits: 3, Image: img})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s\n%s", res.Line(), res.Detail())
	if res.Agents != 2 || res.Extra != 2 || res.Commits != 3 {
		t.Errorf("result %+v, want the scale asked for", res)
	}
	for name, d := range map[string]time.Duration{"p50": res.P50, "p99": res.P99, "alone p50": res.AloneP50, "alone p99": res.AloneP99} {
		if d <= 0 || d > 60*time.Second {
			t.Errorf("%s = %s, want a positive latency under the 60s wait", name, d)
		}
	}
	if res.P50 > res.P99 || res.AloneP50 > res.AloneP99 {
		t.Errorf("p50 above p99: %+v", res)
	}
	if math.IsNaN(res.Ratio) || res.Ratio <= 0 || math.Abs(res.Ratio-float64(res.P99)/float64(res.AloneP99)) > 1e-9 {
		t.Errorf("Ratio = %v, want p99 / alone p99 of %+v", res.Ratio, res)
	}
	if !regexp.MustCompile(`^bench: publish-load agents=2 extra=2 commits=3 ratio=[0-9]+\.[0-9]{2} p50=\S+ p99=\S+ alone-p50=\S+ alone-p99=\S+$`).MatchString(res.Line()) {
		t.Errorf("Line() = %q, want the documented form", res.Line())
	}
	if rows := PublishLoadRows(res); len(rows) != 2 || rows[0].Name != "publish-load-p99" || rows[1].Target.Value != 1 {
		t.Errorf("PublishLoadRows() = %+v", rows)
	}
	noneLeft(t, "/ohdbl-", "ohd-bench-load-")
}

func TestCreateParallelBench(t *testing.T) {
	ctx, img := dockerBench(t)
	res, err := CreateParallel(ctx, CreateParallelOptions{Folders: 2, Rounds: 2, Image: img})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s\n%s", res.Line(), res.Detail())
	if res.Folders != 2 || res.Rounds != 2 || res.InPlace <= 0 || res.Worktree <= 0 {
		t.Errorf("result %+v, want 2 folders and two positive wall times", res)
	}
	if math.IsNaN(res.Ratio) || math.Abs(res.Ratio-float64(res.InPlace)/float64(res.Worktree)) > 1e-9 {
		t.Errorf("Ratio = %v, want in place / worktree of %+v", res.Ratio, res)
	}
	if !regexp.MustCompile(`^bench: create-parallel folders=2 rounds=2 ratio=[0-9]+\.[0-9]{2} in-place=\S+ worktree=\S+$`).MatchString(res.Line()) {
		t.Errorf("Line() = %q, want the documented form", res.Line())
	}
	noneLeft(t, "/ohdbq-", "ohd-bench-load-")
}

// noneLeft fails t if a container mounting a path with mountPart, or named
// with namePart, is left (docker ps: it answers for a wedged container
// too, and has a deadline).
func noneLeft(t *testing.T, mountPart, namePart string) {
	t.Helper()
	out, err := testenv.Docker(2*time.Minute, "ps", "-a", "--no-trunc", "--format", "{{.Names}} {{.Mounts}}")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, mountPart) || strings.HasPrefix(l, namePart) {
			t.Errorf("container left behind: %s", l)
		}
	}
}
