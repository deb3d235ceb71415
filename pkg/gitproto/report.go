package gitproto

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// RefStatus is one ref's line of a report-status: Reason "" is "ok <ref>",
// anything else "ng <ref> <reason>".
type RefStatus struct {
	Ref    string
	Reason string
}

// Side-band payload limits (the band byte included in the pkt-line's
// payload): side-band-64k allows 65519 bytes, side-band 999.
const (
	sideband64kData = MaxPktPayload - 1
	sidebandData    = 999 - 1
)

// Sideband says how a report travels: none, side-band or side-band-64k.
type Sideband uint8

// The side-band modes a client may negotiate.
const (
	NoSideband Sideband = iota
	Sideband1k
	Sideband64k
)

// SidebandOf returns the side-band mode a command list negotiated.
func SidebandOf(l *CommandList) Sideband {
	switch {
	case l.Has("side-band-64k"):
		return Sideband64k
	case l.Has("side-band"):
		return Sideband1k
	}
	return NoSideband
}

// AppendReport appends a report-status (also valid as report-status-v2,
// which only adds option lines after "ok" ones): "unpack <unpack>" ("ok"
// or an error), one line per ref, and a flush; inside side-band channel 1
// (and a final flush) when sb says so. Line feeds in reasons become
// spaces.
func AppendReport(dst []byte, unpack string, refs []RefStatus, sb Sideband) []byte {
	var rep []byte
	rep = AppendString(rep, "unpack "+oneLine(unpack)+"\n")
	for _, r := range refs {
		if r.Reason == "" {
			rep = AppendString(rep, "ok "+oneLine(r.Ref)+"\n")
		} else {
			rep = AppendString(rep, "ng "+oneLine(r.Ref)+" "+oneLine(r.Reason)+"\n")
		}
	}
	rep = AppendFlush(rep)
	if sb == NoSideband {
		return append(dst, rep...)
	}
	max := sideband64kData
	if sb == Sideband1k {
		max = sidebandData
	}
	for len(rep) > 0 {
		n := min(len(rep), max)
		dst = AppendData(dst, append([]byte{1}, rep[:n]...))
		rep = rep[n:]
	}
	return AppendFlush(dst)
}

// oneLine keeps s on one line of at most 1000 bytes, so that a report
// line always fits a pkt-line.
func oneLine(s string) string {
	// Bytewise, so that a ref name that is not UTF-8 is written back as
	// the client sent it (FuzzReadReport).
	b := []byte(truncate(s, 1000))
	for i, c := range b {
		if c == '\n' || c == '\r' || c == 0 {
			b[i] = ' '
		}
	}
	return string(b)
}

// Report is a receive-pack report-status as the host sent it: the unpack
// status ("ok" or the host's error) and one RefStatus per ref line, in
// order. A parsed "ng" line always has a non-empty Reason.
type Report struct {
	Unpack string
	Refs   []RefStatus
}

// OK reports whether the host unpacked the pack and updated ref.
func (rp *Report) OK(ref string) bool {
	if rp.Unpack != "ok" {
		return false
	}
	for _, r := range rp.Refs {
		if r.Ref == ref {
			return r.Reason == ""
		}
	}
	return false
}

// ReadReport reads the report-status (or report-status-v2) that
// git-receive-pack answers a push with, inside side-band channel 1 when
// sb says so (progress on channel 2 is skipped; channel 3, the host's
// fatal error, is an error). It reads up to the report's flush and no
// further. Option lines of report-status-v2 are skipped (they describe a
// ref rewritten by a proc-receive hook, which the relay's refs are
// not). More than maxLines lines, anything that is not a report, or
// input that ends early is an error: the caller then knows nothing of
// what the host did.
func ReadReport(r io.Reader, sb Sideband, maxLines int) (*Report, error) {
	var in io.Reader = r
	if sb != NoSideband {
		in = &demux{pr: NewReader(r)}
	}
	pr := NewReader(in)
	rp := &Report{}
	for n := 0; ; n++ {
		k, p, err := pr.Read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if k != Data {
			if k == Flush && n > 0 {
				return rp, nil
			}
			return nil, fmt.Errorf("%w: unexpected special pkt-line in a report", ErrSyntax)
		}
		if n > maxLines {
			return nil, fmt.Errorf("%w: a report of more than %d lines", ErrSyntax, maxLines)
		}
		line := string(bytes.TrimSuffix(p, []byte("\n")))
		verb, rest, _ := strings.Cut(line, " ")
		switch {
		case n == 0:
			if verb != "unpack" || rest == "" {
				return nil, fmt.Errorf("%w: a report starts with %q, not \"unpack\"", ErrSyntax, printable([]byte(truncate(line, 80))))
			}
			rp.Unpack = rest
		case verb == "ok" && ValidRefName(rest):
			rp.Refs = append(rp.Refs, RefStatus{Ref: rest})
		case verb == "ng":
			ref, reason, _ := strings.Cut(rest, " ")
			if !ValidRefName(ref) {
				return nil, fmt.Errorf("%w: invalid ref name %q in a report", ErrSyntax, printable([]byte(truncate(ref, 80))))
			}
			if reason == "" {
				reason = "(no reason given)"
			}
			rp.Refs = append(rp.Refs, RefStatus{Ref: ref, Reason: reason})
		case verb == "option" && len(rp.Refs) > 0:
		default:
			return nil, fmt.Errorf("%w: unexpected report line %q", ErrSyntax, printable([]byte(truncate(line, 80))))
		}
	}
}

// demux reads side-band channel 1's data out of a side-band stream,
// skipping channel 2; its end is the stream's flush.
type demux struct {
	pr   *Reader
	left []byte
	done bool
}

func (d *demux) Read(p []byte) (int, error) {
	for len(d.left) == 0 {
		if d.done {
			return 0, io.EOF
		}
		k, data, err := d.pr.Read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		switch {
		case k == Flush:
			d.done = true
		case k != Data || len(data) == 0:
			return 0, fmt.Errorf("%w: unexpected pkt-line in a side-band stream", ErrSyntax)
		case data[0] == 1:
			d.left = data[1:]
		case data[0] == 2:
		case data[0] == 3:
			return 0, fmt.Errorf("%w: the host failed: %q", ErrSyntax, printable([]byte(truncate(string(data[1:]), 200))))
		default:
			return 0, fmt.Errorf("%w: side-band channel %d", ErrSyntax, data[0])
		}
	}
	n := copy(p, d.left)
	d.left = d.left[n:]
	return n, nil
}
