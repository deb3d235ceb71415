package packcheck

import (
	"bufio"
	"compress/zlib"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
)

// Object types in a pack entry header.
const (
	objCommit   = 1
	objTree     = 2
	objBlob     = 3
	objTag      = 4
	objOfsDelta = 6
	objRefDelta = 7
)

// Limits bound one pack. A zero field takes its Default.
type Limits struct {
	// MaxPackBytes bounds the pack's own size (default 2 GiB).
	MaxPackBytes int64
	// MaxObjects bounds the number of objects (default 250,000).
	MaxObjects int64
	// MaxObjectBytes bounds each object's size, for a delta the size of
	// its result and of its base (default 256 MiB).
	MaxObjectBytes int64
	// MaxExpandedBytes bounds the sum of every object's size (deltas
	// counted by their result): the work of resolving the pack
	// (default 4 GiB).
	MaxExpandedBytes int64
	// HashSize is the repository's object id size: 20 (SHA-1, default)
	// or 32 (SHA-256).
	HashSize int
}

// The defaults of Limits.
const (
	DefaultMaxPackBytes     = 2 << 30
	DefaultMaxObjects       = 250_000
	DefaultMaxObjectBytes   = 256 << 20
	DefaultMaxExpandedBytes = 4 << 30
)

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	if l.MaxPackBytes <= 0 {
		l.MaxPackBytes = DefaultMaxPackBytes
	}
	if l.MaxObjects <= 0 {
		l.MaxObjects = DefaultMaxObjects
	}
	if l.MaxObjectBytes <= 0 {
		l.MaxObjectBytes = DefaultMaxObjectBytes
	}
	if l.MaxExpandedBytes <= 0 {
		l.MaxExpandedBytes = DefaultMaxExpandedBytes
	}
	if l.HashSize != 32 {
		l.HashSize = 20
	}
	return l
}

// Reasons a pack is refused (Error.Reason).
const (
	ReasonTooManyObjects = "too_many_objects"
	ReasonObjectTooLarge = "object_too_large"
	ReasonPackTooLarge   = "pack_too_large"
	ReasonTooMuchData    = "expands_too_much"
	ReasonMalformed      = "malformed_pack"
)

// ErrRefused is wrapped by every Error.
var ErrRefused = errors.New("pack refused")

// Error is Copy's refusal: Reason is one of the Reason constants, Detail
// says what was found, in a sentence.
type Error struct {
	Reason string
	Detail string
}

func (e *Error) Error() string { return "pack refused (" + e.Reason + "): " + e.Detail }

// Unwrap makes errors.Is(err, ErrRefused) hold.
func (e *Error) Unwrap() error { return ErrRefused }

func refuse(reason, format string, args ...any) error {
	return &Error{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Summary describes a pack Copy accepted.
type Summary struct {
	Version  uint32
	Objects  int64
	Deltas   int64
	Bytes    int64 // the pack's size
	Expanded int64 // the sum of every object's (or delta result's) size
}

// Copy reads one pack from src, checks it against lim and writes every
// byte it read to dst. It returns nil only for a complete pack within the
// limits whose checksum is right; it stops reading at the first entry over
// a limit. An error from dst is returned as is (not an *Error).
func Copy(dst io.Writer, src io.Reader, lim Limits) (Summary, error) {
	lim = lim.WithDefaults()
	h := sha1.New()
	if lim.HashSize == 32 {
		h = sha256.New()
	}
	r := &reader{br: bufio.NewReaderSize(src, 64<<10), dst: dst, h: h, max: lim.MaxPackBytes}
	var s Summary
	var hdr [12]byte
	if err := r.full(hdr[:]); err != nil {
		return s, r.fail(err, "the pack header")
	}
	if string(hdr[:4]) != "PACK" {
		return s, refuse(ReasonMalformed, "not a pack (no PACK signature)")
	}
	s.Version = binary.BigEndian.Uint32(hdr[4:8])
	count := int64(binary.BigEndian.Uint32(hdr[8:12]))
	if s.Version != 2 && s.Version != 3 {
		return s, refuse(ReasonMalformed, "pack version %d (git writes 2 or 3)", s.Version)
	}
	if count > lim.MaxObjects {
		return s, refuse(ReasonTooManyObjects, "the pack declares %d objects, more than the limit of %d", count, lim.MaxObjects)
	}
	var zr io.ReadCloser
	for i := int64(0); i < count; i++ {
		start := r.n
		typ, size, err := r.entryHeader()
		if err != nil {
			return s, r.fail(err, fmt.Sprintf("object %d's header", i))
		}
		if size > lim.MaxObjectBytes {
			return s, refuse(ReasonObjectTooLarge, "object %d declares %d bytes, more than the limit of %d", i, size, lim.MaxObjectBytes)
		}
		switch typ {
		case objCommit, objTree, objBlob, objTag:
		case objOfsDelta:
			ofs, err := r.ofsDelta()
			if err != nil {
				return s, r.fail(err, fmt.Sprintf("object %d's delta offset", i))
			}
			if ofs <= 0 || ofs > start-12 {
				return s, refuse(ReasonMalformed, "object %d's delta base offset %d is outside the pack", i, ofs)
			}
		case objRefDelta:
			base := make([]byte, lim.HashSize)
			if err := r.full(base); err != nil {
				return s, r.fail(err, fmt.Sprintf("object %d's delta base", i))
			}
		default:
			return s, refuse(ReasonMalformed, "object %d has type %d, which no pack holds", i, typ)
		}
		if zr == nil {
			zr, err = zlib.NewReader(r)
		} else {
			err = zr.(zlib.Resetter).Reset(r, nil)
		}
		if err != nil {
			return s, r.fail(err, fmt.Sprintf("object %d's data", i))
		}
		expanded := size
		if typ == objOfsDelta || typ == objRefDelta {
			s.Deltas++
			base, result, used, err := deltaSizes(zr, size)
			r.consumed = used
			if err != nil {
				return s, r.fail(err, fmt.Sprintf("object %d's delta header", i))
			}
			if base > lim.MaxObjectBytes || result > lim.MaxObjectBytes {
				return s, refuse(ReasonObjectTooLarge, "object %d is a delta whose base declares %d bytes and result %d bytes, more than the limit of %d",
					i, base, result, lim.MaxObjectBytes)
			}
			expanded = result
		}
		s.Expanded += expanded
		if s.Expanded > lim.MaxExpandedBytes {
			return s, refuse(ReasonTooMuchData, "the pack's objects expand to more than %d bytes (at object %d)", lim.MaxExpandedBytes, i)
		}
		// The data must inflate to its declared size exactly (git's
		// index-pack checks the same): reading stops one byte past it, so
		// a stream that inflates to more costs nothing extra.
		n, err := io.Copy(io.Discard, io.LimitReader(zr, size-r.consumed+1))
		if err != nil {
			return s, r.fail(err, fmt.Sprintf("object %d's data", i))
		}
		if n+r.consumed != size {
			return s, refuse(ReasonMalformed, "object %d inflates to a size other than its declared %d bytes", i, size)
		}
		r.consumed = 0
		s.Objects++
	}
	sum := h.Sum(nil)
	trailer := make([]byte, lim.HashSize)
	r.h = nil // the trailer is not part of what it sums
	if err := r.full(trailer); err != nil {
		return s, r.fail(err, "the pack's checksum")
	}
	if string(sum) != string(trailer) {
		return s, refuse(ReasonMalformed, "the pack's checksum does not match its content")
	}
	if _, err := r.br.ReadByte(); err != io.EOF {
		if err == nil {
			return s, refuse(ReasonMalformed, "data after the pack's checksum")
		}
		return s, err
	}
	s.Bytes = r.n
	r.flush()
	return s, r.werr
}

// reader counts, hashes and copies every byte read, and is an
// io.ByteReader, so the zlib reader reads no byte past an entry's data.
type reader struct {
	br   *bufio.Reader
	dst  io.Writer
	h    hash.Hash
	n    int64
	max  int64
	werr error
	// consumed is how many inflated bytes deltaSizes read of the entry.
	consumed int64
	wbuf     []byte
	one      [1]byte
	// srcErr is the source's error other than EOF.
	srcErr error
}

func (r *reader) noteErr(err error) {
	if err != nil && err != io.EOF && r.srcErr == nil {
		r.srcErr = err
	}
}

// errTooLarge is the reader's error when the pack exceeds max.
var errTooLarge = errors.New("pack too large")

func (r *reader) emit(p []byte) {
	if r.h != nil {
		r.h.Write(p)
	}
	if r.werr == nil {
		r.wbuf = append(r.wbuf, p...)
		if len(r.wbuf) >= 32<<10 {
			r.flush()
		}
	}
}

func (r *reader) flush() {
	if r.werr == nil && len(r.wbuf) > 0 {
		_, r.werr = r.dst.Write(r.wbuf)
	}
	r.wbuf = r.wbuf[:0]
}

func (r *reader) ReadByte() (byte, error) {
	if r.n >= r.max {
		return 0, errTooLarge
	}
	b, err := r.br.ReadByte()
	if err != nil {
		r.noteErr(err)
		return 0, err
	}
	r.n++
	r.one[0] = b
	r.emit(r.one[:])
	return b, nil
}

func (r *reader) Read(p []byte) (int, error) {
	if r.n >= r.max {
		return 0, errTooLarge
	}
	if int64(len(p)) > r.max-r.n {
		p = p[:r.max-r.n]
	}
	n, err := r.br.Read(p)
	r.noteErr(err)
	r.n += int64(n)
	r.emit(p[:n])
	return n, err
}

func (r *reader) full(p []byte) error {
	_, err := io.ReadFull(r, p)
	return err
}

// fail turns a read error while reading what into Copy's error.
func (r *reader) fail(err error, what string) error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return err
	case errors.Is(err, errTooLarge):
		return refuse(ReasonPackTooLarge, "the pack is larger than the limit of %d bytes", r.max)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return refuse(ReasonMalformed, "the pack ends in %s", what)
	case r.srcErr != nil:
		return fmt.Errorf("read the pack: %s: %w", what, r.srcErr)
	}
	// Not the source's error: zlib's or flate's about the data.
	return refuse(ReasonMalformed, "%s is not valid zlib data: %v", what, err)
}

// entryHeader reads an entry's type and inflated size.
func (r *reader) entryHeader() (typ int, size int64, err error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	typ = int(c>>4) & 7
	size = int64(c & 0x0f)
	shift := uint(4)
	for c&0x80 != 0 {
		if shift > 56 {
			return 0, 0, refuse(ReasonObjectTooLarge, "an object's size header is longer than any real size")
		}
		if c, err = r.ReadByte(); err != nil {
			return 0, 0, err
		}
		size |= int64(c&0x7f) << shift
		shift += 7
	}
	if size < 0 {
		return 0, 0, refuse(ReasonObjectTooLarge, "an object's size header is longer than any real size")
	}
	return typ, size, nil
}

// ofsDelta reads an OFS_DELTA's base offset (git's offset encoding: each
// continuation adds one before shifting).
func (r *reader) ofsDelta() (int64, error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	ofs := int64(c & 0x7f)
	for c&0x80 != 0 {
		if ofs >= 1<<55 {
			return 0, refuse(ReasonMalformed, "a delta base offset is longer than any pack")
		}
		if c, err = r.ReadByte(); err != nil {
			return 0, err
		}
		ofs = ((ofs + 1) << 7) | int64(c&0x7f)
	}
	return ofs, nil
}

// deltaSizes reads the two size varints at the start of a delta's
// inflated data (at most size bytes of it) and says how many inflated
// bytes it consumed.
func deltaSizes(zr io.Reader, size int64) (base, result, consumed int64, err error) {
	var one [1]byte
	next := func() (byte, error) {
		if consumed >= size {
			return 0, refuse(ReasonMalformed, "a delta is shorter than its header")
		}
		if _, err := io.ReadFull(zr, one[:]); err != nil {
			return 0, err
		}
		consumed++
		return one[0], nil
	}
	varint := func() (int64, error) {
		var v int64
		for shift := uint(0); ; shift += 7 {
			if shift > 56 {
				return 0, refuse(ReasonObjectTooLarge, "a delta declares a size longer than any real size")
			}
			c, err := next()
			if err != nil {
				return 0, err
			}
			v |= int64(c&0x7f) << shift
			if c&0x80 == 0 {
				return v, nil
			}
		}
	}
	if base, err = varint(); err == nil {
		result, err = varint()
	}
	return base, result, consumed, err
}
