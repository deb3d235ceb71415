package packgen

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
)

// Object types.
const (
	Commit = 1
	Tree   = 2
	Blob   = 3
	Tag    = 4
)

var typeNames = map[int]string{Commit: "commit", Tree: "tree", Blob: "blob", Tag: "tag"}

// ID returns the object id git gives an object of typ with content.
func ID(typ int, content []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "%s %d\x00", typeNames[typ], len(content))
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil))
}

// Writer writes one pack to W.
type Writer struct {
	w   io.Writer
	h   hash.Hash
	off int64
	err error
	buf bytes.Buffer
	zw  *zlib.Writer
}

// Begin writes the header of a pack declaring count objects.
func Begin(w io.Writer, count uint32) *Writer {
	p := &Writer{h: sha1.New()}
	p.w = io.MultiWriter(w, p.h)
	var hdr [12]byte
	copy(hdr[:], "PACK")
	binary.BigEndian.PutUint32(hdr[4:], 2)
	binary.BigEndian.PutUint32(hdr[8:], count)
	p.write(hdr[:])
	return p
}

func (p *Writer) write(b []byte) {
	if p.err == nil {
		var n int
		n, p.err = p.w.Write(b)
		p.off += int64(n)
	}
}

func entryHeader(typ int, size int64) []byte {
	c := byte(typ<<4) | byte(size&0x0f)
	size >>= 4
	var out []byte
	for size > 0 {
		out = append(out, c|0x80)
		c = byte(size & 0x7f)
		size >>= 7
	}
	return append(out, c)
}

// deflate compresses b, reusing the Writer's zlib state (making one per
// object is what costs).
func (p *Writer) deflate(b []byte) []byte {
	p.buf.Reset()
	if p.zw == nil {
		p.zw, _ = zlib.NewWriterLevel(&p.buf, zlib.BestCompression)
	} else {
		p.zw.Reset(&p.buf)
	}
	p.zw.Write(b)
	p.zw.Close()
	return p.buf.Bytes()
}

// Object adds a whole object and returns its offset in the pack.
func (p *Writer) Object(typ int, content []byte) int64 {
	off := p.off
	p.write(entryHeader(typ, int64(len(content))))
	p.write(p.deflate(content))
	return off
}

// OfsDelta adds a delta (its data as given) against the entry at base.
func (p *Writer) OfsDelta(base int64, delta []byte) int64 {
	off := p.off
	p.write(entryHeader(6, int64(len(delta))))
	ofs := off - base
	enc := []byte{byte(ofs & 0x7f)}
	for ofs >>= 7; ofs > 0; ofs >>= 7 {
		ofs--
		enc = append([]byte{0x80 | byte(ofs&0x7f)}, enc...)
	}
	p.write(enc)
	p.write(p.deflate(delta))
	return off
}

// End writes the checksum and returns the first write error.
func (p *Writer) End() error {
	if p.err == nil {
		_, p.err = p.w.Write(p.h.Sum(nil))
	}
	return p.err
}

// Varint is a delta header size.
func Varint(v int64) []byte {
	var out []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(out, c)
		}
		out = append(out, c|0x80)
	}
}

// DeltaBomb writes a pack of two objects: a 64 KiB blob of zeros and a
// delta against it whose result is result bytes, made of 64 KiB copies
// of the base (each one byte of delta data, so a 16 GiB result is a 256 KiB
// delta that compresses to about a kilobyte).
func DeltaBomb(w io.Writer, result int64) error {
	p := Begin(w, 2)
	const baseSize = 64 << 10
	base := p.Object(Blob, make([]byte, baseSize))
	delta := append(Varint(baseSize), Varint(result)...)
	for left := result; left > 0; left -= baseSize {
		if left >= baseSize {
			delta = append(delta, 0x80) // copy offset 0, size 0x10000
		} else {
			delta = append(delta, 0x90, byte(left)) // copy offset 0, size < 256 (enough for a test)
		}
	}
	p.OfsDelta(base, delta)
	return p.End()
}

// Many writes a pack that declares n objects and holds n distinct tiny
// blobs, generated as it goes (nothing is kept in memory).
func Many(w io.Writer, n uint32) error {
	p := Begin(w, n)
	for i := uint32(0); i < n && p.err == nil; i++ {
		p.Object(Blob, fmt.Appendf(nil, "%d\n", i))
	}
	return p.End()
}

// TreeEntry is one entry of a tree.
type TreeEntry struct {
	Mode, Name, ID string
}

// TreeContent is a tree object's content (entries given in git's order).
func TreeContent(entries ...TreeEntry) []byte {
	var b bytes.Buffer
	for _, e := range entries {
		raw, _ := hex.DecodeString(e.ID)
		fmt.Fprintf(&b, "%s %s\x00", e.Mode, e.Name)
		b.Write(raw)
	}
	return b.Bytes()
}

// CommitContent is a commit object's content.
func CommitContent(tree string, parents []string, msg string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "tree %s\n", tree)
	for _, p := range parents {
		fmt.Fprintf(&b, "parent %s\n", p)
	}
	b.WriteString("author A <a@example.com> 1700000000 +0000\ncommitter A <a@example.com> 1700000000 +0000\n\n" + msg + "\n")
	return b.Bytes()
}

// Obj is an object to pack.
type Obj struct {
	Type    int
	Content []byte
}

// ID is the object's id.
func (o Obj) ID() string { return ID(o.Type, o.Content) }

// Write writes a pack of objs.
func Write(w io.Writer, objs []Obj) error {
	p := Begin(w, uint32(len(objs)))
	for _, o := range objs {
		p.Object(o.Type, o.Content)
	}
	return p.End()
}

// DeepTree returns the objects of a commit (on parent, if not "") whose
// root tree nests depth directories "d/d/d/...", the deepest holding one
// file; the commit is the last object.
func DeepTree(depth int, parent string) []Obj {
	blob := Obj{Blob, []byte("deep\n")}
	objs := []Obj{blob}
	cur := Obj{Tree, TreeContent(TreeEntry{"100644", "f", blob.ID()})}
	objs = append(objs, cur)
	for i := 1; i < depth; i++ {
		cur = Obj{Tree, TreeContent(TreeEntry{"40000", "d", cur.ID()})}
		objs = append(objs, cur)
	}
	var parents []string
	if parent != "" {
		parents = []string{parent}
	}
	return append(objs, Obj{Commit, CommitContent(cur.ID(), parents, "deep")})
}
