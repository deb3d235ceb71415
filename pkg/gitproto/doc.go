// Package gitproto reads and writes the parts of git's wire protocol the
// broker's git relay needs to look at: pkt-lines, the command list a
// client sends to git-receive-pack, and the report-status answer with
// which the relay refuses ref updates in git's own words and from which
// it learns which refs the host updated.
//
// Start with [Reader] (one pkt-line at a time: data, flush "0000", delim
// "0001", response-end "0002"), [ReadCommandList] (shallow lines, the
// commands "old new ref" with the capabilities after a NUL on the first,
// and the push options that follow when the client asked for them),
// [AppendReport] (the "unpack ok" and "ok"/"ng <ref> <reason>" lines,
// inside side-band channel 1 when the client negotiated side-band) and
// [ReadReport] (the host's report, read back out of side-band with the
// progress skipped).
//
// Everything here parses input from a hostile client: lengths are checked
// before anything is read, a command list is bounded ([ReadCommandList]'s
// max), and anything that is not exactly the protocol is an error saying
// what was wrong. FuzzReader, FuzzReadCommandList and FuzzReadReport hold
// the parsers to it.
//
// References: git's Documentation/gitprotocol-common.txt (pkt-line),
// gitprotocol-pack.txt ("Reference Update Request and Packfile Transfer",
// "Report Status") and gitprotocol-capabilities.txt (side-band-64k,
// report-status-v2, atomic, push-options).
package gitproto
