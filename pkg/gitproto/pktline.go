package gitproto

import (
	"errors"
	"fmt"
	"io"
)

// Pkt-line limits: a line is at most 65520 bytes, its 4-byte length
// included.
const (
	MaxPktLen     = 65520
	MaxPktPayload = MaxPktLen - 4
)

// Kind is what a pkt-line is.
type Kind uint8

// The kinds of pkt-line: data, and the three special lengths.
const (
	Data        Kind = iota // "nnnn" + payload, nnnn >= 4
	Flush                   // "0000"
	Delim                   // "0001" (protocol v2)
	ResponseEnd             // "0002" (protocol v2, stateless connections)
)

// ErrSyntax is wrapped by every error about malformed input.
var ErrSyntax = errors.New("git protocol")

// Reader reads pkt-lines. It reads exactly the bytes of the lines it
// returns (never ahead), so what follows the last line read (a pack) is
// still in the underlying reader; Consumed counts the bytes read.
type Reader struct {
	r        io.Reader
	buf      [MaxPktLen]byte
	consumed int64
}

// NewReader returns a Reader on r.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// Consumed is the number of bytes read from the underlying reader so far.
func (pr *Reader) Consumed() int64 { return pr.consumed }

// Read reads the next pkt-line. The payload of a Data line is valid until
// the next call. A length that is not four hex digits, 3 (reserved), or
// over MaxPktLen is an error wrapping ErrSyntax; input that ends inside a
// line is io.ErrUnexpectedEOF; input that ends between lines is io.EOF.
func (pr *Reader) Read() (Kind, []byte, error) {
	hdr := pr.buf[:4]
	n, err := io.ReadFull(pr.r, hdr)
	pr.consumed += int64(n)
	if err != nil {
		if errors.Is(err, io.EOF) && n == 0 {
			return 0, nil, io.EOF
		}
		return 0, nil, io.ErrUnexpectedEOF
	}
	l, ok := parseLen(hdr)
	if !ok {
		return 0, nil, fmt.Errorf("%w: pkt-line length %q is not four hex digits", ErrSyntax, printable(hdr))
	}
	switch {
	case l == 0:
		return Flush, nil, nil
	case l == 1:
		return Delim, nil, nil
	case l == 2:
		return ResponseEnd, nil, nil
	case l == 3:
		return 0, nil, fmt.Errorf("%w: pkt-line length 3 is reserved", ErrSyntax)
	case l > MaxPktLen:
		return 0, nil, fmt.Errorf("%w: pkt-line length %d over the limit of %d", ErrSyntax, l, MaxPktLen)
	}
	p := pr.buf[4:l]
	n, err = io.ReadFull(pr.r, p)
	pr.consumed += int64(n)
	if err != nil {
		return 0, nil, io.ErrUnexpectedEOF
	}
	return Data, p, nil
}

func parseLen(h []byte) (int, bool) {
	v := 0
	for _, c := range h {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | int(d)
	}
	return v, true
}

func printable(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		out[i] = c
	}
	return string(out)
}

const hexDigits = "0123456789abcdef"

// AppendData appends payload as one data pkt-line. It panics if payload
// is longer than MaxPktPayload: callers write lines they composed.
func AppendData(dst, payload []byte) []byte {
	if len(payload) > MaxPktPayload {
		panic("gitproto: pkt-line payload too long")
	}
	n := len(payload) + 4
	dst = append(dst, hexDigits[n>>12&15], hexDigits[n>>8&15], hexDigits[n>>4&15], hexDigits[n&15])
	return append(dst, payload...)
}

// AppendString is AppendData of a string.
func AppendString(dst []byte, s string) []byte { return AppendData(dst, []byte(s)) }

// AppendFlush appends a flush-pkt ("0000").
func AppendFlush(dst []byte) []byte { return append(dst, "0000"...) }
