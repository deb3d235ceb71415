package gitimport

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/hardgit"
)

// packSandbox answers `view pack` from a repository of its own, as the
// conversation's container answers from the view; pack, if set, replaces
// the pack it sends (an agent can make its view send one of its making).
type packSandbox struct {
	src  string
	pack func(w io.Writer) error
}

func (s packSandbox) View(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "pack" {
		return errors.New("unexpected view " + strings.Join(args, " "))
	}
	if s.pack != nil {
		_, _ = io.Copy(io.Discard, stdin)
		return s.pack(stdout)
	}
	cmd := exec.CommandContext(ctx, "git", "pack-objects", "--revs", "--stdout", "--quiet")
	cmd.Dir, cmd.Env, cmd.Stdin, cmd.Stdout = s.src, testenv.GitEnv(), stdin, stdout
	return cmd.Run()
}

// setup returns an Importer and a host repository, and a clone of it (the
// view) with one commit the host lacks.
func setup(t *testing.T) (*Importer, Repo, string, string) {
	t.Helper()
	host := testenv.NewRepo(t, testenv.RepoOptions{})
	src := filepath.Join(testenv.TempDir(t), "view")
	testenv.Git(t, filepath.Dir(src), "clone", "-q", host, src)
	testenv.WriteFile(t, filepath.Join(src, "new.txt"), "only in the view\n")
	testenv.Git(t, src, "add", "new.txt")
	testenv.Git(t, src, "commit", "-q", "-m", "view commit")
	git, err := hardgit.Look()
	if err != nil {
		t.Fatal(err)
	}
	im := &Importer{Git: hardgit.Runner{Path: git, Timeout: time.Minute, EUID: os.Geteuid()}, Started: time.Now()}
	repo := Repo{CommonDir: filepath.Join(host, ".git"), UID: os.Geteuid(), GID: os.Getegid()}
	return im, repo, src, testenv.Git(t, src, "rev-parse", "HEAD")
}

// quarantines lists the quarantine directories left in repo's store.
func quarantines(t *testing.T, repo Repo) []string {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(repo.CommonDir, "objects", QuarantinePrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return left
}

func TestImport(t *testing.T) {
	im, repo, src, tip := setup(t)
	ctx := context.Background()
	if have, err := im.Present(ctx, repo.target(), []string{tip}); err != nil || have[tip] {
		t.Fatalf("Present(view commit) before the import = %v, %v; want it missing", have, err)
	}
	base := testenv.Git(t, src, "rev-parse", "HEAD~1")
	keep, err := im.Import(ctx, repo, packSandbox{src: src}, []string{tip}, []string{base}, []string{tip})
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	keep()
	if have, err := im.Present(ctx, repo.target(), []string{tip, base}); err != nil || !have[tip] || !have[base] {
		t.Errorf("Present after the import = %v, %v; want both commits", have, err)
	}
	if got := testenv.Git(t, repo.CommonDir, "cat-file", "-p", tip+":new.txt"); got != "only in the view" {
		t.Errorf("imported new.txt = %q", got)
	}
	if left := quarantines(t, repo); len(left) != 0 {
		t.Errorf("quarantine left: %q", left)
	}
}

// TestImportRefusesABlobAsCommit: a tip that must be a commit (a branch)
// but is a blob is refused, and nothing reaches the store.
func TestImportRefusesABlobAsCommit(t *testing.T) {
	im, repo, src, _ := setup(t)
	blob := testenv.Git(t, src, "rev-parse", "HEAD:new.txt")
	_, err := im.Import(context.Background(), repo, packSandbox{src: src}, []string{blob}, nil, []string{blob})
	if !errors.Is(err, ErrRefused) || RefusalReason(err) != ReasonNotACommit {
		t.Fatalf("Import(a blob as a branch tip) = %v (reason %q), want refused: %s", err, RefusalReason(err), ReasonNotACommit)
	}
	if _, err := testenv.GitOutput(repo.CommonDir, "cat-file", "-e", blob); err == nil {
		t.Errorf("the refused blob reached the store")
	}
	if left := quarantines(t, repo); len(left) != 0 {
		t.Errorf("quarantine left: %q", left)
	}
}

// TestImportRefusesGarbage: a pack that is no pack is refused by
// packcheck before git reads it.
func TestImportRefusesGarbage(t *testing.T) {
	im, repo, src, tip := setup(t)
	sb := packSandbox{src: src, pack: func(w io.Writer) error {
		_, err := io.WriteString(w, "PACK but not really a pack at all")
		return err
	}}
	_, err := im.Import(context.Background(), repo, sb, []string{tip}, nil, []string{tip})
	if !errors.Is(err, ErrRefused) || RefusalReason(err) == "" {
		t.Fatalf("Import(garbage) = %v (reason %q), want refused with a reason", err, RefusalReason(err))
	}
	if left := quarantines(t, repo); len(left) != 0 {
		t.Errorf("quarantine left: %q", left)
	}
}

func TestDepthWriter(t *testing.T) {
	tests := []struct {
		name string
		in   []string // writes
		max  int
		deep bool
	}{
		{"shallow", []string{"abc a/b/c\n", "def d\n"}, 3, false},
		{"deep", []string{"abc a/b/c/d\n"}, 3, true},
		{"deep across writes", []string{"abc a/b", "/c/d\n"}, 3, true},
		{"slashes before the path do not count", []string{"abc", " a\n"}, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stopped := false
			d := &depthWriter{max: tc.max, stop: func() { stopped = true }}
			for _, w := range tc.in {
				if n, err := d.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			if d.tooDeep != tc.deep || stopped != tc.deep {
				t.Errorf("tooDeep = %v, stopped = %v; want %v", d.tooDeep, stopped, tc.deep)
			}
		})
	}
}
