package packaging

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// TestInstallLaysOutEveryFile: `make install` into a DESTDIR puts the
// binaries, the units, the agents' system user and ohd's kernel settings
// where systemd reads them, and `make uninstall` takes them away again.
func TestInstallLaysOutEveryFile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the systemd files are installed on Linux only")
	}
	if _, err := exec.LookPath("make"); err != nil {
		testenv.Missing(t, "make is not installed")
	}
	root := testenv.ModuleRoot(t)
	dest, bin := t.TempDir(), t.TempDir()
	for _, target := range []string{"install", "uninstall"} {
		cmd := exec.Command("make", "-s", target, "DESTDIR="+dest, "BIN="+bin, "PREFIX=/usr/local")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make %s: %v\n%s", target, err, out)
		}
		for _, f := range []string{
			"usr/local/bin/ohd", "usr/local/bin/ohctl",
			"usr/local/lib/systemd/system/ohd.service", "usr/local/lib/systemd/system/ohd.socket", "usr/local/lib/systemd/system/ohd-api.socket",
			"usr/local/lib/sysusers.d/ohd-agent.conf",
			"usr/local/lib/sysctl.d/60-ohd.conf",
		} {
			_, err := os.Stat(filepath.Join(dest, f))
			if target == "install" && err != nil {
				t.Errorf("make install did not install %s: %v", f, err)
			}
			if target == "uninstall" && err == nil {
				t.Errorf("make uninstall left %s", f)
			}
		}
		if target == "install" {
			got, err := os.ReadFile(filepath.Join(dest, "usr/local/lib/sysctl.d/60-ohd.conf"))
			want, rerr := os.ReadFile(filepath.Join(root, "packaging/systemd/ohd.sysctl"))
			if err != nil || rerr != nil || string(got) != string(want) {
				t.Errorf("the installed sysctl.d file differs from packaging/systemd/ohd.sysctl (%v, %v)", err, rerr)
			}
		}
	}
}

// TestSysctlSettings: every setting of packaging/systemd/ohd.sysctl names
// a kernel parameter this kernel has, and raises it above the kernel's
// default; the inotify instances, which each running conversation's
// watcher holds one of, are among them.
func TestSysctlSettings(t *testing.T) {
	f, err := os.Open(filepath.Join(testenv.ModuleRoot(t), "packaging/systemd/ohd.sysctl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defaults := map[string]int{"fs.inotify.max_user_instances": 128}
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		v, err := strconv.Atoi(val)
		if !ok || err != nil || v <= 0 {
			t.Errorf("line %d %q: want key = positive integer", n, line)
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))); err != nil {
			t.Errorf("line %d: %s is no kernel parameter here: %v", n, key, err)
		}
		if d, ok := defaults[key]; ok && v <= d {
			t.Errorf("line %d: %s = %d does not raise the kernel's default %d", n, key, v, d)
		}
		seen[key] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if _, ok := seen["fs.inotify.max_user_instances"]; !ok {
		t.Errorf("ohd.sysctl does not set fs.inotify.max_user_instances: %v", seen)
	}
}
