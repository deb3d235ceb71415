package packcheck

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/packgen"
)

// gitPack makes a real pack with git: a repository with a few commits of
// related content (so pack-objects writes deltas).
func gitPack(t testing.TB) []byte {
	t.Helper()
	dir := t.TempDir()
	run := func(stdin string, args ...string) []byte {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@x", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@x")
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return out
	}
	run("", "init", "-q")
	body := strings.Repeat("line of text that repeats\n", 2000)
	for i := range 5 {
		os.WriteFile(filepath.Join(dir, "f.txt"), []byte(body+strings.Repeat("x", i)), 0o644)
		run("", "add", ".")
		run("", "commit", "-qm", "c")
	}
	return run("HEAD\n", "pack-objects", "--revs", "--stdout", "-q", "--delta-base-offset")
}

func TestCopyAcceptsGitsPack(t *testing.T) {
	pack := gitPack(t)
	var out bytes.Buffer
	s, err := Copy(&out, bytes.NewReader(pack), Limits{})
	if err != nil {
		t.Fatalf("Copy(git's pack) = %v", err)
	}
	if !bytes.Equal(out.Bytes(), pack) {
		t.Fatalf("Copy wrote %d bytes, not the %d it read", out.Len(), len(pack))
	}
	if s.Objects == 0 || s.Deltas == 0 || s.Bytes != int64(len(pack)) {
		t.Fatalf("Copy summary = %+v, want objects, deltas and %d bytes", s, len(pack))
	}
}

func TestCopyRefuses(t *testing.T) {
	pack := gitPack(t)
	bomb := func(size int64) []byte {
		var b bytes.Buffer
		if err := packgen.DeltaBomb(&b, size); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	corrupt := append([]byte{}, pack...)
	corrupt[len(corrupt)-30] ^= 0xff
	for _, tc := range []struct {
		name   string
		pack   []byte
		lim    Limits
		reason string
	}{
		{"delta bomb 1 GiB", bomb(1 << 30), Limits{}, ReasonObjectTooLarge},
		{"delta bomb 16 GiB", bomb(16 << 30), Limits{}, ReasonObjectTooLarge},
		{"million objects", func() []byte {
			var b bytes.Buffer
			packgen.Begin(&b, 1_000_000)
			return b.Bytes()
		}(), Limits{}, ReasonTooManyObjects},
		{"object limit", pack, Limits{MaxObjectBytes: 1000}, ReasonObjectTooLarge},
		{"expanded limit", pack, Limits{MaxExpandedBytes: 60000}, ReasonTooMuchData},
		{"pack limit", pack, Limits{MaxPackBytes: 100}, ReasonPackTooLarge},
		{"truncated", pack[:len(pack)-5], Limits{}, ReasonMalformed},
		{"trailing data", append(append([]byte{}, pack...), 'x'), Limits{}, ReasonMalformed},
		{"corrupt", corrupt, Limits{}, ""}, // any reason: the flipped byte may say anything
		{"not a pack", []byte("PACX\x00\x00\x00\x02\x00\x00\x00\x01"), Limits{}, ReasonMalformed},
		{"empty", nil, Limits{}, ReasonMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Now()
			_, err := Copy(io.Discard, bytes.NewReader(tc.pack), tc.lim)
			var e *Error
			if !errors.As(err, &e) || (tc.reason != "" && e.Reason != tc.reason) || !errors.Is(err, ErrRefused) {
				t.Fatalf("Copy(%s) = %v, want reason %s", tc.name, err, tc.reason)
			}
			if d := time.Since(t0); d > 2*time.Second {
				t.Fatalf("Copy(%s) took %v", tc.name, d)
			}
		})
	}
}

// TestCopyStopsEarly: a pack refused at its header is not read further
// (the sender's 10^6 objects are never generated).
func TestCopyStopsEarly(t *testing.T) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(packgen.Many(pw, 1_000_000)) }()
	_, err := Copy(io.Discard, pr, Limits{})
	pr.Close()
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("Copy(10^6 objects) = %v, want refused", err)
	}
}

func FuzzCopy(f *testing.F) {
	f.Add(gitPack(f))
	var b bytes.Buffer
	packgen.DeltaBomb(&b, 1<<20)
	f.Add(b.Bytes())
	b.Reset()
	packgen.Write(&b, packgen.DeepTree(3, ""))
	f.Add(b.Bytes())
	f.Fuzz(func(t *testing.T, pack []byte) {
		var out bytes.Buffer
		s, err := Copy(&out, bytes.NewReader(pack), Limits{MaxObjectBytes: 1 << 20, MaxExpandedBytes: 4 << 20})
		if err == nil {
			if !bytes.Equal(out.Bytes(), pack) || s.Bytes != int64(len(pack)) {
				t.Fatalf("accepted pack not copied unchanged")
			}
			return
		}
		if !errors.Is(err, ErrRefused) {
			t.Fatalf("Copy error %v is not a refusal", err)
		}
	})
}
