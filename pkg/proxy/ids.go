package proxy

import (
	"encoding/hex"
	"net/url"
	"strings"

	"github.com/ohd-dev/ohd/pkg/store"
)

// parseID accepts the conversation id forms the agent server's UUID
// validation accepts (32 hex digits, 8-4-4-4-12, in braces, or with a
// "urn:uuid:" prefix, any case) and returns the canonical lower-case
// 8-4-4-4-12 form, which is the only form ohd uses internally.
func parseID(s string) (string, bool) {
	if store.ValidID(s) {
		return s, true // the form every client of ohd's sends: no copy
	}
	t := s
	if len(t) > 45 {
		return "", false
	}
	if len(t) >= 9 && strings.EqualFold(t[:9], "urn:uuid:") {
		t = t[9:]
	} else if len(t) >= 2 && t[0] == '{' && t[len(t)-1] == '}' {
		t = t[1 : len(t)-1]
	}
	var digits string
	switch len(t) {
	case 32:
		digits = t
	case 36:
		if t[8] != '-' || t[13] != '-' || t[18] != '-' || t[23] != '-' {
			return "", false
		}
		digits = t[:8] + t[9:13] + t[14:18] + t[19:23] + t[24:]
	default:
		return "", false
	}
	var b [16]byte
	if n, err := hex.Decode(b[:], []byte(digits)); err != nil || n != 16 {
		return "", false
	}
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], true
}

// conversationsPrefix is the prefix of every conversation route.
const conversationsPrefix = "/api/conversations/"

// forwardPath is a request path under /api/conversations/{id}, split.
type forwardPath struct {
	RawID string // the id segment as sent (unescaped)
	ID    string // canonical id; "" if RawID is not a UUID
	// Tail is the escaped rest after "{id}" (without its leading
	// slash); HasTail tells "/{id}" from "/{id}/".
	Tail    string
	HasTail bool
	// First is the unescaped first segment of Tail.
	First string
}

// parseForwardPath splits an escaped path "/api/conversations/{id}[/tail]".
// ok is false when the path is not under the prefix or its id segment is
// not a valid escape sequence.
func parseForwardPath(escaped string) (fp forwardPath, ok bool) {
	rest, found := strings.CutPrefix(escaped, conversationsPrefix)
	if !found || rest == "" {
		return fp, false
	}
	seg, tail, hasTail := strings.Cut(rest, "/")
	raw, err := url.PathUnescape(seg)
	if err != nil || raw == "" {
		return fp, false
	}
	fp.RawID, fp.Tail, fp.HasTail = raw, tail, hasTail
	fp.ID, _ = parseID(raw)
	first, _, _ := strings.Cut(tail, "/")
	if u, err := url.PathUnescape(first); err == nil {
		fp.First = u
	} else {
		fp.First = first
	}
	return fp, true
}

// innerPath returns the escaped path to request from the inner server.
func (fp forwardPath) innerPath() string {
	if fp.HasTail {
		return conversationsPrefix + fp.ID + "/" + fp.Tail // one allocation
	}
	return conversationsPrefix + fp.ID
}

// authQueryParams are query parameters that may carry a credential; they
// are never forwarded (compared case-insensitively after unescaping).
var authQueryParams = map[string]bool{
	"session_api_key":   true,
	"x-session-api-key": true,
	"x_session_api_key": true,
	"authorization":     true,
	"access_token":      true,
}

// stripAuthQuery removes the credential parameters from a raw query,
// keeping every other parameter byte for byte and in order.
func stripAuthQuery(raw string) string {
	return dropQuery(raw, func(k string) bool { return authQueryParams[strings.ToLower(strings.TrimSpace(k))] })
}

// dropQuery removes from a raw query the parameters whose unescaped name
// drop reports, keeping the others byte for byte.
func dropQuery(raw string, drop func(name string) bool) string {
	if raw == "" {
		return ""
	}
	// Most queries drop nothing: then raw is the answer, with no copy.
	dropped := false
	for rest := raw; rest != "" && !dropped; {
		var p string
		p, rest, _ = strings.Cut(rest, "&")
		k, _, _ := strings.Cut(p, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		dropped = drop(k)
	}
	if !dropped {
		return raw
	}
	parts := strings.Split(raw, "&")
	keep := parts[:0]
	for _, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		if !drop(k) {
			keep = append(keep, p)
		}
	}
	return strings.Join(keep, "&")
}
