package packaging

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/daemon"
	"github.com/ohd-dev/ohd/pkg/masterkey"
	"github.com/ohd-dev/ohd/pkg/sdnotify"
)

var unitFiles = []string{"ohd.service", "ohd.socket", "ohd-api.socket"}

// installedOhd is the ExecStart= binary of ohd.service.
const installedOhd = "/usr/local/bin/ohd"

// maxExposure bounds `systemd-analyze security`'s overall exposure of
// ohd.service (0 = fully locked down, 10 = unprotected; 3.4 when written,
// 3.8 since ohd enters containers' network namespaces, 4.0 without
// RestrictSUIDSGID=, which shared repositories need, 4.2 since ohd binds
// the pins of a submodule checked out mid-conversation into the running
// container's mount namespace: RestrictNamespaces= gains mnt and
// SystemCallFilter= @mount, pkg/nsmount's setns, open_tree and
// move_mount).
// Raising it needs a reason in the commit.
const maxExposure = 4.2

func requireSystemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testenv.Missing(t, "systemd-analyze not found: install Debian's systemd package (apt-get install systemd)")
	}
	return p
}

// stageUnits copies the unit files into a fresh directory, with ExecStart=
// pointing at a built ohd (verify checks that the binary exists and is
// executable), and returns the directory. edit, if non-nil, changes the
// service text further.
func stageUnits(t *testing.T, edit func(string) string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range unitFiles {
		text := readFile(t, filepath.Join("systemd", name))
		if name == "ohd.service" {
			if !strings.Contains(text, "\nExecStart="+installedOhd+" serve\n") {
				t.Fatalf("ohd.service: no line ExecStart=%s serve to point at the test binary", installedOhd)
			}
			text = strings.ReplaceAll(text, "ExecStart="+installedOhd+" ", "ExecStart="+ohdBinary(t)+" ")
			if edit != nil {
				text = edit(text)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// verify runs `systemd-analyze verify` on the staged units and returns the
// lines it printed about them. systemd-analyze exits 0 on most problems
// (unknown keys, bad values: "ignoring"), so its output is the verdict.
// It needs no running systemd: it loads the units into a private manager
// in test mode, so it works as root in a container whose PID 1 is not
// systemd, as in CI. Lines that do not name one of our units (the
// environment's own noise) are only logged.
func verify(t *testing.T, dir string) []string {
	t.Helper()
	args := []string{"verify", "--man=no"}
	for _, name := range unitFiles {
		args = append(args, filepath.Join(dir, name))
	}
	cmd := exec.Command(requireSystemdAnalyze(t), args...)
	out, err := cmd.CombinedOutput()
	var ours []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, dir) || slices.ContainsFunc(unitFiles, func(u string) bool { return strings.Contains(line, u) }) {
			ours = append(ours, line)
		} else if strings.TrimSpace(line) != "" {
			t.Logf("systemd-analyze verify (not about our units): %s", line)
		}
	}
	if err != nil {
		ours = append(ours, "exit: "+err.Error())
	}
	return ours
}

func TestSystemdVerify(t *testing.T) {
	requireSystemdAnalyze(t)
	if got := verify(t, stageUnits(t, nil)); len(got) != 0 {
		t.Errorf("systemd-analyze verify found problems:\n%s", strings.Join(got, "\n"))
	}
}

// The check above can fail: a misspelled directive, which systemd only
// warns about, is caught.
func TestSystemdVerifyCatchesTypos(t *testing.T) {
	requireSystemdAnalyze(t)
	dir := stageUnits(t, func(s string) string {
		return strings.Replace(s, "\nKillMode=mixed\n", "\nKillMode=mixd\nProtectSytem=full\n", 1)
	})
	got := strings.Join(verify(t, dir), "\n")
	for _, want := range []string{"mixd", "ProtectSytem"} {
		if !strings.Contains(got, want) {
			t.Errorf("systemd-analyze verify on a unit with %q said:\n%s\nwant a complaint about it", want, got)
		}
	}
}

var exposureLine = regexp.MustCompile(`Overall exposure level for ohd\.service: ([0-9.]+)`)

func TestSystemdSecurityExposure(t *testing.T) {
	sa := requireSystemdAnalyze(t)
	dir := stageUnits(t, nil)
	out, err := exec.Command(sa, "security", "--offline=yes", "--no-pager", filepath.Join(dir, "ohd.service")).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security --offline=yes: %v\n%s", err, out)
	}
	m := exposureLine.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no overall exposure in systemd-analyze security output:\n%s", out)
	}
	got, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd-analyze security: overall exposure %.1f", got)
	if got > maxExposure {
		t.Errorf("ohd.service exposure %.1f, want at most %.1f: a sandboxing directive was weakened\n%s", got, maxExposure, out)
	}
}

// unit is a parsed unit file: section -> key -> values in order.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	u := unit{}
	section := ""
	for i, line := range strings.Split(readFile(t, path), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		case strings.HasSuffix(line, `\`):
			t.Fatalf("%s:%d: continuation lines are not used in these units", path, i+1)
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", path, i+1, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// one returns the single value of key, failing if it is set more or less
// than once.
func (u unit) one(t *testing.T, section, key string) string {
	t.Helper()
	v := u[section][key]
	if len(v) != 1 {
		t.Fatalf("[%s] %s= is set %d times, want once", section, key, len(v))
	}
	return v[0]
}

// env returns the Environment= assignments of the service.
func (u unit) env(t *testing.T) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, line := range u["Service"]["Environment"] {
		for _, kv := range strings.Fields(line) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("Environment=%s: %q is not NAME=value", line, kv)
			}
			m[k] = v
		}
	}
	return m
}

// TestServiceDecisions pins the choices ohd depends on (see the comments
// in ohd.service for why each is so); verify cannot know them.
func TestServiceDecisions(t *testing.T) {
	svc := parseUnit(t, "systemd/ohd.service")
	want := map[string]string{
		"Type":                     "notify",
		"NotifyAccess":             "main",
		"ExecStart":                installedOhd + " serve",
		"KillMode":                 "mixed",
		"Restart":                  "on-failure",
		"PrivateTmp":               "no", // paths are shared with dockerd
		"ProtectHome":              "no", // repositories live in homes
		"StateDirectory":           "ohd",
		"StateDirectoryMode":       "0711",
		"RuntimeDirectory":         "ohd",
		"RuntimeDirectoryMode":     "0711",
		"RuntimeDirectoryPreserve": "yes", // containers bind-mount broker dirs
		"NoNewPrivileges":          "yes",
	}
	for k, v := range want {
		if got := svc.one(t, "Service", k); got != v {
			t.Errorf("ohd.service %s=%s, want %s", k, got, v)
		}
	}
	env := svc.env(t)
	if env["OHD_STATE_DIR"] != "/var/lib/"+svc.one(t, "Service", "StateDirectory") ||
		env["OHD_RUNTIME_DIR"] != "/run/"+svc.one(t, "Service", "RuntimeDirectory") {
		t.Errorf("ohd.service OHD_STATE_DIR=%s OHD_RUNTIME_DIR=%s disagree with StateDirectory= and RuntimeDirectory=", env["OHD_STATE_DIR"], env["OHD_RUNTIME_DIR"])
	}
	for k := range env {
		if strings.Contains(k, "KEY") || strings.Contains(k, "TOKEN") || strings.Contains(k, "SECRET") {
			t.Errorf("ohd.service sets %s in Environment=, which any user can read with systemctl show", k)
		}
	}
	// Without a path, a missing credential does not fail the start: the
	// master key, the upstream agent server's OH_SECRET_KEY, and the API
	// keys the README's Canvas set-up writes (issue 28: without this line
	// that set-up answered 401 to every call).
	if d := cmp.Diff([]string{masterkey.CredentialName, "ohd-upstream-secret-key", "ohd-session-api-keys"}, svc["Service"]["LoadCredential"]); d != "" {
		t.Errorf("ohd.service LoadCredential= (-want +got), each without a path (optional):\n%s", d)
	}
	caps := strings.Fields(svc.one(t, "Service", "CapabilityBoundingSet"))
	slices.Sort(caps)
	wantCaps := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SYS_ADMIN", "CAP_SYS_PTRACE"}
	if diff := cmp.Diff(wantCaps, caps); diff != "" {
		t.Errorf("ohd.service CapabilityBoundingSet= (-want +got); each capability is justified in the unit:\n%s", diff)
	}
}

func TestSocketDecisions(t *testing.T) {
	svc := parseUnit(t, "systemd/ohd.service")
	control := parseUnit(t, "systemd/ohd.socket")
	api := parseUnit(t, "systemd/ohd-api.socket")

	// The control socket is where ohd and ohctl look by default.
	runDir := svc.env(t)["OHD_RUNTIME_DIR"]
	if got, want := control.one(t, "Socket", "ListenStream"), runDir+"/ohd.sock"; got != want {
		t.Errorf("ohd.socket ListenStream=%s, want %s (<runtime-dir>/ohd.sock)", got, want)
	}
	for _, c := range []struct {
		u          unit
		file, name string
	}{{control, "ohd.socket", sdnotify.NameControl}, {api, "ohd-api.socket", sdnotify.NameAPI}} {
		if got := c.u.one(t, "Socket", "FileDescriptorName"); got != c.name {
			t.Errorf("%s FileDescriptorName=%s, want %s (the name ohd takes it by)", c.file, got, c.name)
		}
		if got := c.u.one(t, "Socket", "Service"); got != "ohd.service" {
			t.Errorf("%s Service=%s, want ohd.service", c.file, got)
		}
	}
	if got := control.one(t, "Socket", "SocketMode"); got != "0600" {
		t.Errorf("ohd.socket SocketMode=%s, want 0600", got)
	}
	if got, want := control.one(t, "Socket", "DirectoryMode"), svc.one(t, "Service", "RuntimeDirectoryMode"); got != want {
		t.Errorf("ohd.socket DirectoryMode=%s, want RuntimeDirectoryMode=%s", got, want)
	}
	host, _, err := net.SplitHostPort(api.one(t, "Socket", "ListenStream"))
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		t.Errorf("ohd-api.socket ListenStream=%s: want a loopback host:port", api.one(t, "Socket", "ListenStream"))
	}
}

// TestSystemdDropInsFromREADME verifies every [Service] drop-in README.md
// shows, applied to ohd.service, so the documentation cannot drift into
// settings systemd ignores.
func TestSystemdDropInsFromREADME(t *testing.T) {
	requireSystemdAnalyze(t)
	readme := readFile(t, "README.md")
	var snippets []string
	for _, block := range strings.Split(readme, "```ini\n")[1:] {
		body, _, ok := strings.Cut(block, "```")
		if !ok {
			t.Fatal("README.md: unterminated ```ini block")
		}
		if strings.HasPrefix(body, "[Service]\n") {
			snippets = append(snippets, body)
		}
	}
	if len(snippets) < 3 {
		t.Fatalf("found %d [Service] drop-ins in README.md, want at least 3 (settings, master key, ReadWritePaths)", len(snippets))
	}
	for i, s := range snippets {
		dir := stageUnits(t, nil)
		dropIns := filepath.Join(dir, "ohd.service.d")
		if err := os.Mkdir(dropIns, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dropIns, "readme.conf"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := verify(t, dir); len(got) != 0 {
			t.Errorf("README.md drop-in %d:\n%s\nsystemd-analyze verify:\n%s", i+1, s, strings.Join(got, "\n"))
		}
	}
}

// TestRestartPreventExitStatus: the exit status the unit does not restart
// on is the one ohd gives for bad usage and invalid settings, and not the
// one it gives for an error met while starting (an engine that is not up
// yet, which a restart can fix).
func TestRestartPreventExitStatus(t *testing.T) {
	svc := parseUnit(t, "systemd/ohd.service")
	want, err := strconv.Atoi(svc.one(t, "Service", "RestartPreventExitStatus"))
	if err != nil {
		t.Fatalf("RestartPreventExitStatus=: %v", err)
	}
	if want != daemon.ExitUsage {
		t.Errorf("RestartPreventExitStatus=%d, want daemon.ExitUsage (%d)", want, daemon.ExitUsage)
	}
	dirs := []string{"--state-dir", t.TempDir(), "--runtime-dir", t.TempDir()}
	exit := func(env []string, args ...string) int {
		t.Helper()
		cmd := exec.Command(ohdBinary(t), append([]string{"serve"}, args...)...)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("ohd serve %v: %v (want an exit status)\n%s", args, err, out)
		}
		t.Logf("ohd serve %v: %v: %s", args, err, strings.TrimSpace(string(out)))
		return ee.ExitCode()
	}
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{nil, append([]string{"--no-such-flag"}, dirs...)},
		{nil, append([]string{"--listen", "localhost"}, dirs...)},
		{[]string{"OHD_RUNTIME=dockerr"}, dirs},
		{nil, append([]string{"--listen", "0.0.0.0:8000"}, dirs...)},
		{nil, append([]string{"extra-argument"}, dirs...)},
	} {
		if got := exit(c.env, c.args...); got != want {
			t.Errorf("ohd serve %v %v exited %d, want %d (not restarted)", c.env, c.args, got, want)
		}
	}
	// No engine: a restart may find it up.
	if got := exit([]string{"DOCKER_HOST=unix://" + filepath.Join(t.TempDir(), "none.sock")},
		append([]string{"--runtime", "docker", "--listen", "off"}, dirs...)...); got == want || got == 0 {
		t.Errorf("ohd serve without a Docker engine exited %d, want a status the unit restarts on", got)
	}
}
