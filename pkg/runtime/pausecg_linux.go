//go:build linux

package runtime

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
