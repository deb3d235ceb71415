package broker

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// redactor masks every occurrence of its keys in a stream without
// delaying the stream more than it must: after masking the occurrences in
// what it has, it holds back only the longest tail that could be the start
// of a key (usually nothing), so a streamed response (SSE, chunked) still
// flows chunk by chunk. Occurrences become '*' of the same length, which
// keeps Content-Length right.
//
// Use: read into space(), pass the count to advance, send what it
// returns; at the end of the stream send flush().
type redactor struct {
	keys       [][]byte // none empty
	buf        []byte
	start, end int // held bytes are buf[start:end]
}

const redactBufSize = 32 << 10

// newRedactor returns a redactor of keys; empty keys are ignored.
func newRedactor(keys ...[]byte) *redactor {
	r := &redactor{}
	longest := 0
	for _, k := range keys {
		if len(k) > 0 {
			r.keys = append(r.keys, k)
			longest = max(longest, len(k))
		}
	}
	r.buf = make([]byte, longest+redactBufSize)
	return r
}

// space moves held bytes to the front and returns where the next read
// goes.
func (r *redactor) space() []byte {
	if r.start > 0 {
		r.end = copy(r.buf, r.buf[r.start:r.end])
		r.start = 0
	}
	return r.buf[r.end:]
}

// advance accounts for n bytes read into space() and returns the bytes
// that are safe to send; they stay valid until the next call to space.
func (r *redactor) advance(n int) []byte {
	data := r.buf[:r.end+n]
	keep := 0
	for _, k := range r.keys {
		maskAll(data, k)
	}
	for _, k := range r.keys {
		keep = max(keep, partialSuffix(data, k))
	}
	r.start, r.end = len(data)-keep, len(data)
	return data[:len(data)-keep]
}

// flush returns what is held at the end of the stream: a start of a key
// that never completed, so not a key.
func (r *redactor) flush() []byte {
	out := r.buf[r.start:r.end]
	r.start, r.end = 0, 0
	return out
}

// maskAll replaces every occurrence of key in data by '*'.
func maskAll(data, key []byte) {
	for i := 0; ; {
		j := bytes.Index(data[i:], key)
		if j < 0 {
			return
		}
		s := i + j
		for k := s; k < s+len(key); k++ {
			data[k] = '*'
		}
		i = s + len(key)
	}
}

// partialSuffix returns the length of the longest suffix of data, shorter
// than key, that is a prefix of key.
func partialSuffix(data, key []byte) int {
	from := len(data) - min(len(key)-1, len(data))
	for i := from; i < len(data); i++ {
		if data[i] == key[0] && bytes.HasPrefix(key, data[i:]) {
			return len(data) - i
		}
	}
	return 0
}

// redactString masks key in s.
func redactString(s string, key []byte) string {
	if len(key) == 0 || !strings.Contains(s, string(key)) {
		return s
	}
	return strings.ReplaceAll(s, string(key), strings.Repeat("*", len(key)))
}

// redactStrings masks every key in s.
func redactStrings(s string, keys [][]byte) string {
	for _, k := range keys {
		s = redactString(s, k)
	}
	return s
}

// streamRedacted copies an upstream's answer body to w through red, so
// no masked value reaches the client even split across reads. It flushes
// after every read, or with flushOnPause only after a read that did not
// fill the buffer (bulk data: a pack). rec.Reason says how a stream that
// did not end cleanly ended: client_gone (the client left, which also
// cancels the upstream's request) or upstream_interrupted; the error
// that cut the stream is returned (nil at its end), and the caller, once
// it has audited, ends the client's connection (endCut) so that a cut
// stream never looks whole to the client.
func streamRedacted(w http.ResponseWriter, r *http.Request, rec *AuditRecord, body io.Reader, red *redactor, flushOnPause bool) error {
	rc := http.NewResponseController(w)
	for {
		space := red.space()
		n, rerr := body.Read(space)
		if n > 0 {
			if chunk := red.advance(n); len(chunk) > 0 {
				if _, werr := w.Write(chunk); werr != nil {
					rec.Reason = "client_gone"
					return werr
				}
				if !flushOnPause || n < len(space) {
					_ = rc.Flush()
				}
			}
		}
		if rerr != nil {
			if tail := red.flush(); len(tail) > 0 {
				_, _ = w.Write(tail)
			}
			switch {
			case rerr == io.EOF:
				return nil
			case r.Context().Err() != nil:
				rec.Reason = "client_gone"
			default:
				rec.Reason = "upstream_interrupted"
			}
			return rerr
		}
	}
}

// endCut ends the handler of a stream streamRedacted returned cut with
// err: the upstream's failure is logged (masked), and the client's
// connection is closed without the end of the answer, so the client sees
// an error rather than a short answer that looks whole (as
// httputil.ReverseProxy does). A client that left needs neither.
func (c *conversation) endCut(err error, rec *AuditRecord, masked [][]byte) {
	if err == nil || rec.Reason == "client_gone" {
		return
	}
	c.b.log.Warn("broker: the upstream's answer was cut; the client's connection is ended with it",
		"conversation", c.id, "route", rec.Route, "name", rec.Name, "err", redactStrings(err.Error(), masked))
	panic(http.ErrAbortHandler)
}
