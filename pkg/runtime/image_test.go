package runtime

// TEMPORARY: a throwaway test image until internal/testimage lands; then
// this file goes and the tests call testimage.Ensure (one image builder in
// the repository).

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/moby/moby/client"
	"github.com/ohd-dev/ohd/internal/testenv"
)

const miniStandin = `package main

import (
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() {
	start := time.Now()
	delay, _ := time.ParseDuration(os.Getenv("STANDIN_HEALTH_DELAY"))
	if d, err := time.ParseDuration(os.Getenv("STANDIN_EXIT_AFTER")); err == nil {
		go func() {
			time.Sleep(d)
			fmt.Fprintf(os.Stderr, "standin: exiting after %v as asked\n", d)
			os.Exit(3)
		}()
	}
	http.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		if time.Since(start) < delay {
			w.WriteHeader(503)
			return
		}
		fmt.Fprintln(w, "{\"status\":\"ok\"}")
	})
	fmt.Println("standin: listening on :8000")
	fmt.Fprintln(os.Stderr, "standin: uid", os.Getuid())
	if err := http.ListenAndServe(":8000", nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
`

var (
	testImageOnce sync.Once
	testImageRef  string
	testImageErr  error
)

// testImage returns the reference of an image with /usr/local/bin/standin
// (GET /health on :8000, STANDIN_HEALTH_DELAY, STANDIN_EXIT_AFTER) and
// /bin/sh, id, touch, cat, sleep.
func testImage(t testing.TB) string {
	t.Helper()
	testenv.RequireDocker(t)
	testImageOnce.Do(func() { testImageRef, testImageErr = buildTestImage() })
	if testImageErr != nil {
		t.Fatalf("build test image: %v", testImageErr)
	}
	return testImageRef
}

func buildTestImage() (string, error) {
	dir, err := os.MkdirTemp("", "ohd-runtime-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(miniStandin), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module standin\n\ngo 1.22\n"), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "standin")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &buildErr{err, out}
	}
	files := map[string]string{"/usr/local/bin/standin": bin}
	for _, p := range []string{"/bin/sh", "/usr/bin/id", "/usr/bin/touch", "/usr/bin/cat", "/usr/bin/sleep"} {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return "", err
		}
		files[p] = real
		out, err := exec.Command("ldd", real).Output()
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					files[f] = f
				}
			}
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, d := range []string{"/tmp", "/etc", "/proc", "/sys", "/dev"} {
		mode := int64(0o755)
		if d == "/tmp" {
			mode = 0o1777
		}
		tw.WriteHeader(&tar.Header{Name: d[1:] + "/", Typeflag: tar.TypeDir, Mode: mode})
		dirs[d] = true
	}
	for dst := range files {
		for p := filepath.Dir(dst); p != "/"; p = filepath.Dir(p) {
			dirs[p] = true
		}
	}
	// Parents first.
	var all []string
	for d := range dirs {
		all = append(all, d)
	}
	sortByDepth(all)
	for _, d := range all {
		if d == "/tmp" || d == "/etc" || d == "/proc" || d == "/sys" || d == "/dev" {
			continue
		}
		tw.WriteHeader(&tar.Header{Name: d[1:] + "/", Typeflag: tar.TypeDir, Mode: 0o755})
	}
	for dst, src := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			return "", err
		}
		tw.WriteHeader(&tar.Header{Name: dst[1:], Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b))})
		tw.Write(b)
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\n"
	tw.WriteHeader(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(passwd))})
	tw.Write([]byte(passwd))
	if err := tw.Close(); err != nil {
		return "", err
	}

	c, err := client.New(client.FromEnv)
	if err != nil {
		return "", err
	}
	defer c.Close()
	const ref = "ohd-runtime-test:dev"
	rc, err := c.ImageImport(context.Background(), client.ImageImportSource{Source: &buf, SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: []string{`CMD ["/usr/local/bin/standin"]`, `ENV PATH=/usr/local/bin:/usr/bin:/bin`}})
	if err != nil {
		return "", err
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return "", err
	}
	return ref, nil
}

func sortByDepth(s []string) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if strings.Count(s[j], "/") < strings.Count(s[i], "/") || (strings.Count(s[j], "/") == strings.Count(s[i], "/") && s[j] < s[i]) {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

type buildErr struct {
	err error
	out []byte
}

func (e *buildErr) Error() string { return e.err.Error() + ": " + string(e.out) }
