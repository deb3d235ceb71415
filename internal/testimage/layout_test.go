package testimage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseLdd(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    []string
		wantErr error
	}{
		{"glibc", `	linux-vdso.so.1 (0x00007ffd1a5f3000)
	libpcre2-8.so.0 => /lib/x86_64-linux-gnu/libpcre2-8.so.0 (0x00007f5bd3a41000)
	libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f5bd3a22000)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f5bd341e000)
	/lib64/ld-linux-x86-64.so.2 (0x00007f5bd3aee000)
`, []string{
			"/lib/x86_64-linux-gnu/libpcre2-8.so.0", "/lib/x86_64-linux-gnu/libz.so.1",
			"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2",
		}, nil},
		{"musl", `	/lib/ld-musl-x86_64.so.1 (0x7f0000000000)
	libz.so.1 => /lib/libz.so.1 (0x7f0000100000)
	libc.musl-x86_64.so.1 => /lib/ld-musl-x86_64.so.1 (0x7f0000000000)
`, []string{"/lib/ld-musl-x86_64.so.1", "/lib/libz.so.1"}, nil},
		{"unclean path", "libx.so => /usr/lib/../lib/libx.so (0x1)\n", []string{"/usr/lib/libx.so"}, nil},
		{"static", "\tstatically linked\n", nil, nil},
		{"empty", "", nil, nil},
		{"missing", "libgone.so.3 => not found\n", nil, errLibraryNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLdd(tt.out)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("parseLdd(%q) error = %v, want %v", tt.out, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseLdd(%q) (-want +got):\n%s", tt.out, diff)
			}
		})
	}
}

func FuzzParseLdd(f *testing.F) {
	f.Add("\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x1)\n\t/lib64/ld-linux-x86-64.so.2 (0x2)\n")
	f.Add("libgone.so => not found\n")
	f.Add("linux-vdso.so.1 (0x1)")
	f.Fuzz(func(t *testing.T, out string) {
		paths, err := parseLdd(out)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, p := range paths {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p || seen[p] {
				t.Fatalf("parseLdd(%q) = %q: %q is not a new, clean, absolute path", out, paths, p)
			}
			seen[p] = true
		}
	})
}

func TestLayoutAdd(t *testing.T) {
	l := newLayout()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.add(&entry{Path: "/a/b/file", Kind: kindFile, Mode: 0o644, Data: []byte("x")}))
	must(l.add(&entry{Path: "/a/b/file", Kind: kindFile, Mode: 0o644, Data: []byte("x")})) // identical again
	must(l.add(&entry{Path: "/a", Kind: kindDir, Mode: 0o700}))
	if err := l.add(&entry{Path: "/a/b/file", Kind: kindFile, Data: []byte("y")}); !errors.Is(err, errConflict) {
		t.Errorf("adding different content at one path: %v, want errConflict", err)
	}
	if err := l.add(&entry{Path: "/a/b/file/under", Kind: kindFile}); !errors.Is(err, errConflict) {
		t.Errorf("adding below a file: %v, want errConflict", err)
	}
	var got []string
	for _, e := range l.sorted() {
		got = append(got, e.Path)
	}
	if diff := cmp.Diff([]string{"/", "/a", "/a/b", "/a/b/file"}, got); diff != "" {
		t.Errorf("sorted paths (-want +got):\n%s", diff)
	}
	if m := l.entries["/a"].Mode; m != 0o700 {
		t.Errorf("explicit mode of /a = %o, want 700", m)
	}
}

func TestLayoutHostMirrorsSymlinks(t *testing.T) {
	root := t.TempDir()
	// root/real/lib/libx.so, root/lib -> real/lib, root/lib/liby.so -> libx.so
	if err := os.MkdirAll(filepath.Join(root, "real", "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "real", "lib", "libx.so"), []byte("elf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real/lib", filepath.Join(root, "lib")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("libx.so", filepath.Join(root, "real", "lib", "liby.so")); err != nil {
		t.Fatal(err)
	}
	l := newLayout()
	if err := l.host(filepath.Join(root, "lib", "liby.so")); err != nil {
		t.Fatal(err)
	}
	want := map[string]entry{
		filepath.Join(root, "lib"):                    {Kind: kindSymlink, Link: "real/lib"},
		filepath.Join(root, "real", "lib", "liby.so"): {Kind: kindSymlink, Link: "libx.so"},
		filepath.Join(root, "real", "lib", "libx.so"): {Kind: kindFile, Src: filepath.Join(root, "real", "lib", "libx.so")},
	}
	for p, w := range want {
		e, ok := l.entries[p]
		if !ok {
			t.Errorf("layout lacks %s", p)
			continue
		}
		if e.Kind != w.Kind || e.Link != w.Link || e.Src != w.Src {
			t.Errorf("layout entry %s = %+v, want %+v", p, *e, w)
		}
	}
	if err := l.host(filepath.Join(root, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("host of a missing path: %v, want ErrNotExist", err)
	}
}

func TestHostLayout(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image layout copies Linux host binaries")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	lay, err := hostLayout(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	git, _ := exec.LookPath("git")
	for _, p := range []string{git, "/bin/sh", "/etc/passwd", "/etc/group", "/tmp", "/usr/local/bin"} {
		if _, err := resolve(lay, p); err != nil {
			t.Errorf("layout lacks %s: %v", p, err)
		}
	}
	if e, err := resolve(lay, "/bin/sh"); err != nil || e.Kind != kindFile {
		t.Errorf("/bin/sh in the layout resolves to %+v, %v, want a file", e, err)
	}
	if e := lay.entries["/tmp"]; e == nil || e.Mode != 0o777|fs.ModeSticky {
		t.Errorf("/tmp = %+v, want mode 1777", e)
	}
	if !strings.Contains(etcPasswd, ":1000:1000:") {
		t.Errorf("passwd lacks uid 1000")
	}
	// Every library git needs is in the layout, following links.
	libs, err := sharedLibraries(context.Background(), git)
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) == 0 {
		t.Logf("git is static here: no libraries")
	}
	for _, lib := range libs {
		if e, err := resolve(lay, lib); err != nil || e.Kind != kindFile {
			t.Errorf("layout lacks %s, which git loads: %+v, %v", lib, e, err)
		}
	}
	// The tar holds every entry, with /tmp sticky, and parents first.
	var buf bytes.Buffer
	if err := writeTar(&buf, lay.sorted()); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	seen := map[string]bool{"": true}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if parent := filepath.Dir(name); parent != "." && !seen[parent] {
			t.Errorf("tar entry %s precedes its parent %s", name, parent)
		}
		seen[name] = true
		if name == "tmp" && hdr.Mode != 0o1777 {
			t.Errorf("tar /tmp mode = %o, want 1777", hdr.Mode)
		}
		// The agent server's image gives /workspace to its own user
		// (reference §6); everything else is root's.
		wantUID := 0
		if name == "workspace" || name == "workspace/project" || name == "home/openhands" {
			wantUID = ImageUID
			if hdr.Mode != 0o755 {
				t.Errorf("tar entry %s mode = %o, want 755", name, hdr.Mode)
			}
		}
		if hdr.Uid != wantUID || hdr.Gid != wantUID || !hdr.ModTime.Equal(tarTime) {
			t.Errorf("tar entry %s: uid %d gid %d mtime %s, want %d and %s", name, hdr.Uid, hdr.Gid, hdr.ModTime, wantUID, tarTime)
		}
	}
	if len(seen)-1 != len(lay.entries)-1 { // minus "" and minus "/"
		t.Errorf("tar has %d entries, layout %d (without /)", len(seen)-1, len(lay.entries)-1)
	}
}

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlock, err := lockAt(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := lockAt(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while held: %v, want a deadline error", err)
	}
	unlock()
	unlock2, err := lockAt(context.Background(), path)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()

	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := lockAt(context.Background(), link); err == nil {
		t.Error("lock through a symlink succeeded, want it refused")
	}
}

// resolve follows p through the layout's directories and symlinks, as the
// kernel would inside the image, and returns the entry it names.
func resolve(l *layout, p string) (*entry, error) {
	for range maxSymlinks {
		parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
		cur := "/"
		restart := ""
		for i, part := range parts {
			next := filepath.Join(cur, part)
			e, ok := l.entries[next]
			if !ok {
				return nil, fmt.Errorf("%s: no entry %s", p, next)
			}
			if e.Kind == kindSymlink {
				target := e.Link
				if !filepath.IsAbs(target) {
					target = filepath.Join(filepath.Dir(next), target)
				}
				restart = filepath.Join(append([]string{target}, parts[i+1:]...)...)
				break
			}
			if i == len(parts)-1 {
				return e, nil
			}
			if e.Kind != kindDir {
				return nil, fmt.Errorf("%s: %s is not a directory", p, next)
			}
			cur = next
		}
		p = restart
	}
	return nil, fmt.Errorf("%s: too many symlinks", p)
}
