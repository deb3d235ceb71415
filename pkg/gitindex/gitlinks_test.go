package gitindex

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// git runs git in dir with the test environment and fails the test on an
// error.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return testenv.Git(t, dir, args...)
}

// lsFilesGitlinks is the oracle: the gitlinks `git ls-files --stage`
// prints.
func lsFilesGitlinks(t testing.TB, repo string) []string {
	t.Helper()
	var out []string
	for _, e := range strings.Split(git(t, repo, "ls-files", "--stage", "-z"), "\x00") {
		meta, path, ok := strings.Cut(e, "\t")
		if ok && strings.HasPrefix(meta, "160000 ") {
			out = append(out, path)
		}
	}
	return out
}

// longGitlink is a gitlink path longer than the 12 bits of an entry's
// name length (0xfff: "look for the NUL").
var longGitlink = strings.Repeat("nnnnnnnn/", 460) + "s"

// repoWithGitlinks makes a repository whose index holds files, nested
// directories and gitlinks (one in a conflict, so at three stages), with
// index.version v and whatever extra setup asks for.
func repoWithGitlinks(t testing.TB, v string, extra func(repo string)) string {
	return repoWith(t, v, true, extra)
}

// repoWith is repoWithGitlinks, with longGitlink only when long (no
// checkout makes a path that long).
func repoWith(t testing.TB, v string, long bool, extra func(repo string)) string {
	t.Helper()
	repo := filepath.Join(t.TempDir(), "repo")
	testenv.InitRepo(t, repo, "main")
	git(t, repo, "config", "index.version", v)
	sub := filepath.Join(t.TempDir(), "sub")
	testenv.InitRepo(t, sub, "main")
	head := strings.TrimSpace(git(t, sub, "rev-parse", "HEAD"))
	for _, p := range []string{"a/deep/file.txt", "a/deep/other.txt", "b.txt", "vendor/x/y.go", strings.Repeat("long/", 20) + "name.txt"} {
		testenv.WriteFile(t, filepath.Join(repo, p), p+"\n")
	}
	git(t, repo, "add", "-A")
	links := []string{"vendor/lib", "a/deep/sub", "z-sub"}
	if long {
		links = append(links, longGitlink)
	}
	for _, p := range links {
		git(t, repo, "update-index", "--add", "--cacheinfo", "160000,"+head+","+p)
	}
	git(t, repo, "commit", "-q", "-m", "gitlinks")
	// A conflict on a gitlink: stages 1, 2 and 3 of conflicted/sub.
	var info strings.Builder
	for stage := 1; stage <= 3; stage++ {
		info.WriteString("160000 " + head + " " + string(rune('0'+stage)) + "\tconflicted/sub\n")
	}
	cmd := exec.Command("git", "update-index", "--index-info")
	cmd.Dir, cmd.Env, cmd.Stdin = repo, append(os.Environ(), testenv.GitEnv()...), strings.NewReader(info.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git update-index --index-info: %v\n%s", err, out)
	}
	if extra != nil {
		extra(repo)
	}
	return repo
}

// TestGitlinksAsGitListsThem: for index versions 2, 3 (an intent-to-add
// entry carries extended flags) and 4 (prefix-compressed paths), with the
// cache-tree and other extensions git writes, Gitlinks gives what
// `git ls-files --stage` gives, stages included, in the same order.
func TestGitlinksAsGitListsThem(t *testing.T) {
	for _, v := range []string{"2", "3", "4"} {
		t.Run("v"+v, func(t *testing.T) {
			repo := repoWithGitlinks(t, v, func(repo string) {
				testenv.WriteFile(t, filepath.Join(repo, "later.txt"), "later\n")
				git(t, repo, "add", "--intent-to-add", "later.txt")
				git(t, repo, "update-index", "--index-version", v)
			})
			want := lsFilesGitlinks(t, repo)
			if len(want) != 7 {
				t.Fatalf("the oracle lists %d gitlinks, want 7: %q", len(want), want)
			}
			got, err := Gitlinks(filepath.Join(repo, ".git", "index"), os.Getuid())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("Gitlinks = %q\nwant       %q", got, want)
			}
		})
	}
}

// TestGitlinksAsksGitForWhatItDoesNotRead: a split index, a sparse index,
// a SHA-256 repository, another owner's file, a symlink and a damaged
// file are ErrUnsupported (the caller runs git); a missing index is an
// empty one.
func TestGitlinksAsksGitForWhatItDoesNotRead(t *testing.T) {
	unsupported := func(t *testing.T, path string, uid int, why string) {
		t.Helper()
		got, err := Gitlinks(path, uid)
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), why) {
			t.Errorf("Gitlinks = %q, %v; want ErrUnsupported saying %q", got, err, why)
		}
	}
	t.Run("split-index", func(t *testing.T) {
		repo := repoWithGitlinks(t, "2", func(repo string) { git(t, repo, "update-index", "--split-index") })
		unsupported(t, filepath.Join(repo, ".git", "index"), os.Getuid(), "split")
	})
	t.Run("sparse-index", func(t *testing.T) {
		repo := repoWith(t, "2", false, func(repo string) {
			git(t, repo, "reset", "-q", "--hard")
			git(t, repo, "sparse-checkout", "set", "--cone", "--sparse-index", "b")
		})
		unsupported(t, filepath.Join(repo, ".git", "index"), os.Getuid(), "sparse")
	})
	t.Run("sha256", func(t *testing.T) {
		repo := filepath.Join(t.TempDir(), "repo")
		git(t, t.TempDir(), "init", "-q", "--object-format=sha256", repo)
		testenv.WriteFile(t, filepath.Join(repo, "f"), "f\n")
		git(t, repo, "add", "f")
		unsupported(t, filepath.Join(repo, ".git", "index"), os.Getuid(), "checksum")
	})
	repo := repoWithGitlinks(t, "2", nil)
	index := filepath.Join(repo, ".git", "index")
	t.Run("another-owner", func(t *testing.T) { unsupported(t, index, os.Getuid()+1, "uid") })
	t.Run("symlink", func(t *testing.T) {
		link := filepath.Join(t.TempDir(), "index")
		if err := os.Symlink(index, link); err != nil {
			t.Fatal(err)
		}
		unsupported(t, link, os.Getuid(), "open")
	})
	t.Run("damaged", func(t *testing.T) {
		b, err := os.ReadFile(index)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0xff
		p := filepath.Join(t.TempDir(), "index")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		unsupported(t, p, os.Getuid(), "checksum")
	})
	t.Run("missing", func(t *testing.T) {
		if got, err := Gitlinks(filepath.Join(t.TempDir(), "index"), os.Getuid()); err != nil || got != nil {
			t.Errorf("Gitlinks of a missing index = %q, %v; want nothing, nil", got, err)
		}
	})
}

// FuzzParseGitlinks: any input is parsed without a panic and within its
// bounds; what comes back are paths git could have written.
func FuzzParseGitlinks(f *testing.F) {
	// Seeds: the indexes git writes, every version.
	for _, v := range []string{"2", "3", "4"} {
		repo := repoWithGitlinks(f, v, func(repo string) {
			testenv.WriteFile(f, filepath.Join(repo, "later.txt"), "later\n")
			git(f, repo, "add", "--intent-to-add", "later.txt")
		})
		b, err := os.ReadFile(filepath.Join(repo, ".git", "index"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("DIRC\x00\x00\x00\x02\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		links, err := ParseGitlinks(b)
		if err != nil {
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("ParseGitlinks error %v is not ErrUnsupported", err)
			}
			return
		}
		for _, l := range links {
			if strings.IndexByte(l, 0) >= 0 {
				t.Fatalf("a path with a NUL: %q", l)
			}
		}
	})
}
