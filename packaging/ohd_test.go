package packaging

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// buildDir holds the ohd binary the tests share; TestMain removes it.
var buildDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ohd-packaging-")
	if err != nil {
		panic(err)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var built struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

// ohdBinary builds ./cmd/ohd once for all tests and returns its path.
func ohdBinary(t *testing.T) string {
	t.Helper()
	root := testenv.ModuleRoot(t)
	built.once.Do(func() {
		built.path = filepath.Join(buildDir, "ohd")
		cmd := exec.Command("go", "build", "-o", built.path, "./cmd/ohd")
		cmd.Dir = root
		built.out, built.err = cmd.CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("go build ./cmd/ohd: %v\n%s", built.err, built.out)
	}
	return built.path
}

// serveHelp is what `ohd serve --help` documents: flag names (without
// dashes) and environment variable names.
type serveHelp struct {
	flags map[string]bool
	env   map[string]bool
}

var (
	helpFlag = regexp.MustCompile(`^\s+--([a-z0-9-]+)`)
	helpEnv  = regexp.MustCompile(`\[\$([A-Z0-9_]+)\]\s*$`)
)

func ohdServeHelp(t *testing.T) serveHelp {
	t.Helper()
	out, err := exec.Command(ohdBinary(t), "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("ohd serve --help: %v\n%s", err, out)
	}
	h := serveHelp{flags: map[string]bool{}, env: map[string]bool{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := helpFlag.FindStringSubmatch(sc.Text()); m != nil {
			h.flags[m[1]] = true
		}
		if m := helpEnv.FindStringSubmatch(sc.Text()); m != nil {
			h.env[m[1]] = true
		}
	}
	// The parse itself must work, or every check against it passes.
	if !h.flags["state-dir"] || !h.env["OHD_STATE_DIR"] {
		t.Fatalf("could not find --state-dir and $OHD_STATE_DIR in `ohd serve --help`:\n%s", out)
	}
	return h
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var ohdVar = regexp.MustCompile(`\bOHD_[A-Z0-9_]+`)

// TestNamesExistInOhd: a variable or flag misspelled in a service file is
// silently ignored by the service manager and by ohd; here it fails.
func TestNamesExistInOhd(t *testing.T) {
	help := ohdServeHelp(t)
	for _, f := range []string{"systemd/ohd.service", "systemd/ohd.socket", "systemd/ohd-api.socket", "launchd/dev.ohd.ohd.plist"} {
		for _, name := range ohdVar.FindAllString(readFile(t, f), -1) {
			if !help.env[name] {
				t.Errorf("%s names $%s, which `ohd serve --help` does not list", f, name)
			}
		}
	}
}
