//go:build linux

package runtime

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ohd-dev/ohd/pkg/freeze"
)

// cgroupRoot is where the host's cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// freezerOf returns the cgroup directory whose processes the engine's
// pause freezes for the container whose first process is pid, and whether
// it is cgroup v2's: read from /proc/<pid>/cgroup as the host sees it.
func freezerOf(pid int) (dir string, v2 bool, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", false, err
	}
	var unified string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "freezer" {
				return filepath.Join(cgroupRoot, "freezer", parts[2]), false, nil
			}
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
		}
	}
	if unified != "" {
		return filepath.Join(cgroupRoot, unified), true, nil
	}
	return "", false, fmt.Errorf("no freezer cgroup for process %d", pid)
}

// startingIn lists the processes of the cgroup dir that the container
// runtime is still starting (runc's init of an exec): freezing one of
// them wedges the engine on the container (freeze.IsRuntimeInit).
func startingIn(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err == nil && freeze.IsRuntimeInit(strings.TrimSpace(string(comm))) {
			out = append(out, pid)
		}
	}
	return out, nil
}

// thawCgroup thaws the cgroup dir directly, for when the engine's own
// unpause does not answer (it waits on the process its freeze stopped).
func thawCgroup(dir string, v2 bool) error {
	if v2 {
		return os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"), 0)
	}
	return os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0)
}

// freezeCgroup freezes the cgroup dir directly and waits, within ctx,
// until every process in it is frozen: for a container the engine holds
// paused after ohd thawed its freezer by hand (thawCgroup).
func freezeCgroup(ctx context.Context, dir string, v2 bool) error {
	file, value, done := filepath.Join(dir, "freezer.state"), "FROZEN", func(b []byte) bool { return strings.TrimSpace(string(b)) == "FROZEN" }
	check := file
	if v2 {
		file, value, check = filepath.Join(dir, "cgroup.freeze"), "1", filepath.Join(dir, "cgroup.events")
		done = func(b []byte) bool { return bytes.Contains(b, []byte("frozen 1")) }
	}
	if err := os.WriteFile(file, []byte(value), 0); err != nil {
		return err
	}
	for {
		b, err := os.ReadFile(check)
		if err != nil {
			return err
		}
		if done(b) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: still freezing: %w", dir, context.Cause(ctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
}
