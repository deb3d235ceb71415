package gitproto

import "strings"

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
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == 0 {
			return ' '
		}
		return r
	}, s)
	return truncate(s, 1000)
}
