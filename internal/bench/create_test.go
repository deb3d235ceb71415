package bench

import (
	"context"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
)

func TestCreateBench(t *testing.T) {
	ctx, img := dockerBench(t)
	res, err := Create(ctx, CreateOptions{Iterations: 2, Image: img, Files: 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Op != "create" || res[1].Op != "remove" {
		t.Fatalf("Create() returned %+v, want the create and remove results", res)
	}
	line := regexp.MustCompile(`^bench: (create|remove) ratio=[0-9]+\.[0-9]{2} ohd=\S+ baseline=\S+ own=\S+$`)
	for _, r := range res {
		t.Logf("%s\n%s", r.Line(), r.Detail())
		if !line.MatchString(r.Line()) {
			t.Errorf("Line() = %q, want the documented form", r.Line())
		}
		if math.IsNaN(r.Ratio) || math.IsInf(r.Ratio, 0) || r.Ratio <= 0 {
			t.Errorf("%s: Ratio = %v, want a finite positive number", r.Op, r.Ratio)
		}
		for _, side := range []struct {
			name string
			b    Breakdown
		}{{"ohd", r.OHD}, {"baseline", r.Baseline}} {
			if side.b.Total.N != 2 || side.b.Total.Median <= 0 {
				t.Errorf("%s %s: Total = %+v, want 2 positive samples", r.Op, side.name, side.b.Total)
			}
			// Every part is measured on both sides, and the parts fit in
			// the total.
			var parts time.Duration
			for i, s := range side.b.Steps {
				if s.N != 2 || s.Median <= 0 {
					t.Errorf("%s %s: step %s = %+v, want 2 positive samples", r.Op, side.name, r.Steps[i], s)
				}
				parts += s.Median
			}
			if side.b.Own.N != 2 || side.b.Own.Median < 0 {
				t.Errorf("%s %s: Own = %+v, want 2 non-negative samples", r.Op, side.name, side.b.Own)
			}
		}
	}
	// Nothing is left behind: no container of either side (both mount
	// paths under Create's temporary directory, named ohdbc-*).
	// docker ps answers for every container, also one the engine is
	// wedged on (inspect would hang on it: issue 27); and it has a
	// deadline too.
	out, err := testenv.Docker(2*time.Minute, "ps", "-a", "--no-trunc", "--format", "{{.Names}} {{.Mounts}}")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "/ohdbc-") {
			t.Errorf("container left behind: %s", l)
		}
	}
}

func TestStat(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var ds []time.Duration
		for _, n := range ns {
			ds = append(ds, time.Duration(n)*time.Millisecond)
		}
		return ds
	}
	tests := []struct {
		name string
		in   []time.Duration
		want Stat
	}{
		{"empty", nil, Stat{}},
		{"one", ms(5), Stat{Median: 5 * time.Millisecond, P90: 5 * time.Millisecond, N: 1}},
		{"odd", ms(3, 1, 2), Stat{Median: 2 * time.Millisecond, P90: 3 * time.Millisecond, N: 3}},
		{"even", ms(4, 1, 3, 2), Stat{Median: 2500 * time.Microsecond, P90: 4 * time.Millisecond, N: 4}},
		{"ten", ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), Stat{Median: 5500 * time.Microsecond, P90: 9 * time.Millisecond, N: 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, stat(tt.in)); diff != "" {
				t.Errorf("stat(%v) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestBreakdown(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	samples := []stepSample{
		{total: ms(100), steps: map[string]time.Duration{StepWorktree: ms(10), StepContainer: ms(40), StepReady: ms(30)}},
		{total: ms(120), steps: map[string]time.Duration{StepWorktree: ms(20), StepContainer: ms(50), StepReady: ms(30)}},
	}
	got := breakdown(samples, createSteps)
	want := Breakdown{
		Steps: []Stat{
			{Median: ms(15), P90: ms(20), N: 2},
			{Median: ms(45), P90: ms(50), N: 2},
			{Median: ms(30), P90: ms(30), N: 2},
		},
		Total: Stat{Median: ms(110), P90: ms(120), N: 2},
		Own:   Stat{Median: ms(20), P90: ms(20), N: 2},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("breakdown() mismatch (-want +got):\n%s", diff)
	}

	// A step missing from a stepSample leaves Own unmeasured.
	samples[1].steps = map[string]time.Duration{StepContainer: ms(50), StepReady: ms(30)}
	got = breakdown(samples, createSteps)
	if got.Own.N != 0 {
		t.Errorf("breakdown() with a step missing: Own = %+v, want unmeasured", got.Own)
	}
	if got.Steps[0].N != 1 {
		t.Errorf("breakdown() with a step missing: worktree = %+v, want 1 stepSample", got.Steps[0])
	}
}

func TestCreateResultLine(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	r := CreateResult{
		Op: "create", Iterations: 10, Steps: createSteps, Ratio: 1.0449,
		OHD: Breakdown{
			Steps: []Stat{{ms(20), ms(25), 10}, {ms(300), ms(350), 10}, {ms(400), ms(500), 10}},
			Total: Stat{ms(812.34), ms(900), 10}, Own: Stat{ms(31.25), ms(40), 10},
		},
		Baseline: Breakdown{
			Steps: []Stat{{ms(10), ms(12), 10}, {ms(300), ms(340), 10}, {ms(400), ms(450), 10}},
			Total: Stat{ms(777.7), ms(850), 10}, Own: Stat{ms(1), ms(2), 10},
		},
	}
	if got, want := r.Line(), "bench: create ratio=1.04 ohd=812.3ms baseline=777.7ms own=31.3ms"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
	wantDetail := strings.Join([]string{
		"create: 10 iterations each, median / p90",
		"  step       ohd                   baseline",
		"  worktree   20ms / 25ms           10ms / 12ms",
		"  container  300ms / 350ms         300ms / 340ms",
		"  ready      400ms / 500ms         400ms / 450ms",
		"  total      812.3ms / 900ms       777.7ms / 850ms",
		"  own        31.3ms / 40ms         1ms / 2ms",
	}, "\n")
	if diff := cmp.Diff(wantDetail, r.Detail()); diff != "" {
		t.Errorf("Detail() mismatch (-want +got):\n%s", diff)
	}
	r.OHD.Own = Stat{}
	if got, want := r.Line(), "bench: create ratio=1.04 ohd=812.3ms baseline=777.7ms own=n/a"; got != want {
		t.Errorf("Line() without own = %q, want %q", got, want)
	}
	if got := fmtDur(1234567 * time.Microsecond); got != "1.235s" {
		t.Errorf("fmtDur(1.234567s) = %q, want %q", got, "1.235s")
	}
}

// dockerBench prepares a test that runs a benchmark at a tiny scale on
// Docker: skipped under -short, the engine required, the test image
// built, and a context whose budget includes building ohd and ohctl
// (-trimpath: not what go test -race has cached) on two cores busy with
// the other packages' tests.
func dockerBench(t *testing.T) (context.Context, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped under -short: it runs the benchmark for a moment")
	}
	testenv.RequireDocker(t)
	img := testimage.Ensure(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	return ctx, img
}
