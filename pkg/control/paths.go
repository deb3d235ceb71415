package control

import (
	"errors"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
)

// DefaultDirs returns the default state and runtime directories: system
// paths for root (/var/lib/ohd, /run/ohd), XDG paths otherwise
// ($XDG_STATE_HOME/ohd, $XDG_RUNTIME_DIR/ohd; without XDG_RUNTIME_DIR,
// <tmp>/ohd-<uid>).
func DefaultDirs(getenv func(string) string) (state, run string, err error) {
	if os.Geteuid() == 0 {
		if goruntime.GOOS == "darwin" {
			// macOS has neither /var/lib nor /run; /var is a symlink to
			// /private/var, written canonically (paths reach Docker).
			return "/usr/local/var/ohd", "/private/var/run/ohd", nil
		}
		return "/var/lib/ohd", "/run/ohd", nil
	}
	state = getenv("XDG_STATE_HOME")
	if state == "" {
		home := getenv("HOME")
		if home == "" {
			return "", "", errors.New("neither XDG_STATE_HOME nor HOME is set: pass --state-dir")
		}
		state = filepath.Join(home, ".local", "state")
	}
	run = getenv("XDG_RUNTIME_DIR")
	if run == "" {
		return filepath.Join(state, "ohd"), filepath.Join(os.TempDir(), "ohd-"+strconv.Itoa(os.Geteuid())), nil
	}
	return filepath.Join(state, "ohd"), filepath.Join(run, "ohd"), nil
}

// DefaultSocket is where ohctl finds the daemon when neither --socket nor
// OHD_CONTROL_SOCKET is given: <runtime-dir>/ohd.sock.
func DefaultSocket(getenv func(string) string) string {
	if p := getenv("OHD_CONTROL_SOCKET"); p != "" {
		return p
	}
	_, run, err := DefaultDirs(getenv)
	if err != nil {
		return ""
	}
	return filepath.Join(run, "ohd.sock")
}
