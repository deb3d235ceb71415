package testimage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// Ref is the image reference Ensure returns and Build's default:
// ohd-test-agent:dev, or $OHD_TEST_IMAGE when set (so checkouts of
// different sources on one engine, tested at the same time, do not
// rebuild one tag under each other's running tests).
var Ref = refFromEnv()

func refFromEnv() string {
	if r := os.Getenv("OHD_TEST_IMAGE"); r != "" {
		return r
	}
	return "ohd-test-agent:dev"
}

// ImageUID is the uid of the image's own user (openhands), which owns
// /workspace, as in the agent server's image (reference §6).
const ImageUID = 10001

// LabelInputs is the image label holding the digest of the build inputs.
const LabelInputs = "dev.ohd.test-image.inputs"

// ErrUnsupportedHost is returned by Build where the image cannot be
// assembled: not Linux, or an engine of another architecture.
var ErrUnsupportedHost = errors.New("testimage: host cannot assemble the test image")

// ensured remembers, per test process, that Ensure ran: later tests reuse
// its outcome instead of checking again (a failed build fails them fast).
var ensured struct {
	sync.Mutex
	done bool
	err  error
}

// Ensure returns Ref after making sure the image exists in the Docker
// engine and matches the current sources; it builds the image if needed.
// Without Docker (or off Linux) it stops t through testenv.Missing: a skip,
// or a failure with CI=true.
func Ensure(t testing.TB) string {
	t.Helper()
	testenv.RequireDocker(t)
	if runtime.GOOS != "linux" {
		testenv.Missing(t, "the test image is assembled from this host's git and libraries, which needs a Linux host (GOOS=%s)", runtime.GOOS)
	}
	ensured.Lock()
	defer ensured.Unlock()
	if !ensured.done {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		ensured.err = ensure(ctx, Ref, false)
		cancel()
		ensured.done = true
	}
	if ensured.err != nil {
		t.Fatalf("testimage.Ensure(%s): %v", Ref, ensured.err)
	}
	return Ref
}

// Build builds the image and tags it ref, whether or not an up-to-date one
// exists. It must run inside this module's checkout (it builds
// ./integration/standin and ./cmd/ohctl).
func Build(ctx context.Context, ref string) error {
	return ensure(ctx, ref, true)
}

// ensure builds ref if force is set or its inputs label differs from the
// current inputs, holding the cross-process lock throughout.
func ensure(ctx context.Context, ref string, force bool) error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("%w: the image copies this host's git binaries, which needs Linux (GOOS=%s)", ErrUnsupportedHost, runtime.GOOS)
	}
	unlock, err := lock(ctx, ref)
	if err != nil {
		return err
	}
	defer unlock()

	root, err := moduleRoot()
	if err != nil {
		return err
	}
	eng, err := newEngine()
	if err != nil {
		return err
	}
	defer eng.Close()

	lay, err := hostLayout(ctx)
	if err != nil {
		return err
	}
	digest, err := inputsDigest(ctx, root, lay)
	if err != nil {
		return err
	}
	oldID, oldDigest := eng.imageLabel(ctx, ref)
	if !force && oldDigest == digest {
		return nil
	}
	newID, err := build(ctx, eng, root, lay, ref, digest)
	if err != nil {
		return err
	}
	if oldID != "" && oldID != newID {
		eng.removeImage(ctx, oldID) // best effort: the old image is untagged now
	}
	return nil
}

// lockPath is the file every process building the image ref locks: one
// per tag, so checkouts that test under their own $OHD_TEST_IMAGE never
// wait for each other's builds.
func lockPath(ref string) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' {
			return r
		}
		return '_'
	}, ref)
	return filepath.Join(os.TempDir(), "ohd-test-image-"+name+".lock")
}

// lock takes the cross-process build lock of ref, waiting until ctx ends.
func lock(ctx context.Context, ref string) (unlock func(), err error) {
	return lockAt(ctx, lockPath(ref))
}

// lockAt takes an exclusive flock of the file at path (created if absent),
// waiting until ctx ends.
func lockAt(ctx context.Context, path string) (unlock func(), err error) {
	// O_RDONLY suffices for flock and lets users share a file another user
	// created; O_NOFOLLOW refuses a planted symlink in a shared /tmp.
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testimage: open lock %s: %w", path, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("testimage: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("testimage: waiting for another process building the image (lock %s): %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// modulePath is this module's path, to recognize its root.
const modulePath = "github.com/ohd-dev/ohd"

// moduleRoot finds the directory of this module's go.mod, from the working
// directory up (go test runs in the package directory, go run wherever it
// was started).
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("testimage: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && isModule(b) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("testimage: no go.mod of %s above %s: run inside the ohd checkout", modulePath, wd)
		}
	}
}

func isModule(gomod []byte) bool {
	for line := range strings.Lines(string(gomod)) {
		if strings.TrimSpace(line) == "module "+modulePath {
			return true
		}
	}
	return false
}
