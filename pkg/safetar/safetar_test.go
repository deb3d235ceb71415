package safetar

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type entry struct {
	name, body, link string
	typ              byte
	size             int64 // overrides len(body) in the header when set
}

func archive(t testing.TB, es ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644, Linkname: e.link}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if e.size != 0 {
			h.Size = e.size
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.body != "" {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

var own = Options{UID: -1, GID: -1}

func TestExtractWritesFilesAndDirs(t *testing.T) {
	dest := t.TempDir()
	o := own
	o.Prefix = "conversations"
	res, err := Extract(bytes.NewReader(archive(t,
		entry{name: "conversations/", typ: tar.TypeDir},
		entry{name: "conversations/abc/", typ: tar.TypeDir},
		entry{name: "conversations/abc/meta.json", typ: tar.TypeReg, body: `{"id":"abc"}`},
		entry{name: "conversations/abc/events/event-00000-x.json", typ: tar.TypeReg, body: "{}"},
	)), dest, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 2 || res.Bytes != int64(len(`{"id":"abc"}`)+2) {
		t.Fatalf("result %+v", res)
	}
	b, err := os.ReadFile(filepath.Join(dest, "abc", "meta.json"))
	if err != nil || string(b) != `{"id":"abc"}` {
		t.Fatalf("meta.json: %q %v", b, err)
	}
	fi, err := os.Stat(filepath.Join(dest, "abc", "events"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("events dir: %v %v", fi, err)
	}
	fi, _ = os.Stat(filepath.Join(dest, "abc", "meta.json"))
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v, want 0600", fi.Mode())
	}
}

// TestExtractSkipsLinksAndDevices: an agent's symlink to the host's files
// and a hard link to one are never created; the file written through the
// link's name afterwards lands below the destination, not at its target.
func TestExtractSkipsLinksAndDevices(t *testing.T) {
	dest := t.TempDir()
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := Extract(bytes.NewReader(archive(t,
		entry{name: "out", typ: tar.TypeSymlink, link: outside},
		entry{name: "hard", typ: tar.TypeLink, link: victim},
		entry{name: "dev", typ: tar.TypeChar},
		entry{name: "fifo", typ: tar.TypeFifo},
		entry{name: "out/victim", typ: tar.TypeReg, body: "agent"},
	)), dest, own)
	if err != nil {
		t.Fatal(err)
	}
	if res.SkippedCount != 4 {
		t.Fatalf("skipped %d (%v), want 4", res.SkippedCount, res.Skipped)
	}
	if b, _ := os.ReadFile(victim); string(b) != "host" {
		t.Fatalf("the host's file became %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dest, "out")); err != nil || !fi.IsDir() {
		t.Fatalf("out: %v %v, want a directory made by Extract", fi, err)
	}
}

// TestExtractRefusesASymlinkPlantedInDest: even a link already in the
// destination (not made by Extract) is not followed out of it.
func TestExtractRefusesASymlinkPlantedInDest(t *testing.T) {
	dest, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dest, "link")); err != nil {
		t.Fatal(err)
	}
	_, err := Extract(bytes.NewReader(archive(t, entry{name: "link/x", typ: tar.TypeReg, body: "agent"})), dest, own)
	if err == nil {
		t.Fatal("a file written through a planted link was accepted")
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the file reached the link's target: %v", err)
	}
}

func TestExtractRefuses(t *testing.T) {
	for _, tc := range []struct {
		what string
		o    Options
		es   []entry
		want string
	}{
		{"dotdot", own, []entry{{name: "../escape", typ: tar.TypeReg, body: "x"}}, "climbs out"},
		{"inner dotdot", own, []entry{{name: "a/../../escape", typ: tar.TypeReg, body: "x"}}, "climbs out"},
		{"absolute", own, []entry{{name: "/etc/passwd", typ: tar.TypeReg, body: "x"}}, "absolute"},
		{"outside prefix", Options{Prefix: "conversations", UID: -1, GID: -1}, []entry{{name: "other/x", typ: tar.TypeReg, body: "x"}}, "not under"},
		{"oversized", Options{MaxBytes: 10, UID: -1, GID: -1}, []entry{{name: "a", typ: tar.TypeReg, body: "123456"}, {name: "b", typ: tar.TypeReg, body: "123456"}}, "bytes"},
		{"too many", Options{MaxEntries: 2, UID: -1, GID: -1}, []entry{{name: "a/", typ: tar.TypeDir}, {name: "b/", typ: tar.TypeDir}, {name: "c/", typ: tar.TypeDir}}, "entries"},
		{"duplicate", own, []entry{{name: "a", typ: tar.TypeReg, body: "1"}, {name: "a", typ: tar.TypeReg, body: "2"}}, "twice"},
		{"file then dir", own, []entry{{name: "a", typ: tar.TypeReg, body: "1"}, {name: "a/b", typ: tar.TypeReg, body: "2"}}, "both"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			parent := t.TempDir()
			dest := filepath.Join(parent, "dest")
			if err := os.Mkdir(dest, 0o700); err != nil {
				t.Fatal(err)
			}
			_, err := Extract(bytes.NewReader(archive(t, tc.es...)), dest, tc.o)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrRefused saying %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(parent, "escape")); err == nil {
				t.Fatal("a file escaped the destination")
			}
		})
	}
}

// TestExtractBoundsADeclaredSize: a header declaring a huge file is
// refused before anything is read or written.
func TestExtractBoundsADeclaredSize(t *testing.T) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	_ = tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 1 << 40, Mode: 0o644})
	dest := t.TempDir()
	_, err := Extract(bytes.NewReader(b.Bytes()), dest, Options{MaxBytes: 1 << 20, UID: -1, GID: -1})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("err %v, want ErrRefused", err)
	}
	if _, err := os.Stat(filepath.Join(dest, "big")); err == nil {
		t.Fatal("the oversized file was created")
	}
}

// FuzzExtract: whatever the archive, nothing is written outside the
// destination and nothing but files and directories is made.
func FuzzExtract(f *testing.F) {
	f.Add(archive(f, entry{name: "c/", typ: tar.TypeDir}, entry{name: "c/a", typ: tar.TypeReg, body: "x"}))
	f.Add(archive(f, entry{name: "c/l", typ: tar.TypeSymlink, link: "/etc"}, entry{name: "c/l/x", typ: tar.TypeReg, body: "x"}))
	f.Add(archive(f, entry{name: "c/../x", typ: tar.TypeReg, body: "x"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dest := filepath.Join(parent, "dest")
		if err := os.Mkdir(dest, 0o700); err != nil {
			t.Fatal(err)
		}
		_, _ = Extract(bytes.NewReader(data), dest, Options{Prefix: "c", MaxBytes: 1 << 16, MaxEntries: 64, UID: -1, GID: -1})
		ents, _ := os.ReadDir(parent)
		if len(ents) != 1 {
			t.Fatalf("something was written beside the destination: %v", ents)
		}
		_ = filepath.WalkDir(dest, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !d.Type().IsRegular() {
				t.Fatalf("%s is neither a file nor a directory: %v", p, d.Type())
			}
			return nil
		})
	})
}
