package broker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
)

// hopHeaders are hop-by-hop (RFC 9110 section 7.6.1): never forwarded.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// credentialHeaders are request headers the proxy drops: the caller's own
// credentials (the broker injects the profile's), cookies, and the
// broker's marker.
var credentialHeaders = []string{
	"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key", "Cookie",
	"X-Ohd-Request",
}

// llmProxy serves ANY /v1/llm/{profile}/proxy/{path...}: it forwards the
// request to the profile's base URL + path with the API key injected and
// streams the answer back, flushing after every read, with every
// occurrence of the key masked in headers, body and trailers.
func (c *conversation) llmProxy(w http.ResponseWriter, r *http.Request, rec *AuditRecord, conv *Conversation, name string) {
	if !granted(conv.Grants.LLM, name) {
		c.refuse(w, rec, notGranted(KindLLM))
		return
	}
	p, err := c.b.opts.Backend.LLMProfile(r.Context(), name)
	if err != nil {
		c.backendFailed(w, rec, err, KindLLM, name)
		return
	}
	if len(r.Header["Upgrade"]) > 0 {
		c.refuse(w, rec, refUpgrade)
		return
	}
	rest, ok := proxyRest(r.URL.EscapedPath())
	if !ok {
		c.refuse(w, rec, refBadPath)
		return
	}
	target, err := proxyTarget(p.BaseURL, rest, r.URL.RawQuery)
	if err != nil {
		if errors.Is(err, errBadProxyPath) {
			c.refuse(w, rec, refBadPath)
			return
		}
		c.b.log.Error("broker: llm profile has an invalid base URL; fix it on the host", "profile", name)
		c.refuse(w, rec, refInternal)
		return
	}
	c.forward(w, r, rec, forwarded{
		target: target, what: "llm provider", name: name, drop: p.AuthHeader, masked: [][]byte{p.APIKey},
		inject: func(h http.Header) {
			if len(p.APIKey) > 0 {
				if p.AuthHeader == "" {
					h.Set("Authorization", "Bearer "+string(p.APIKey))
				} else {
					h.Set(p.AuthHeader, string(p.APIKey))
				}
			}
		},
	})
}

// forwarded is a proxied request: where it goes, the credentials to
// inject, and the values to mask in the answer.
type forwarded struct {
	target string // the URL
	what   string // "llm provider", "mcp server": for the log
	name   string // the profile or server
	// drop is a header of the caller's dropped besides credentialHeaders
	// (the one the credential goes in), or "".
	drop   string
	inject func(http.Header)
	masked [][]byte
}

// forward sends r to f.target with f's credentials and streams the answer
// back, flushing after every read, with every occurrence of f.masked
// masked in headers, body and trailers. It audits the request.
func (c *conversation) forward(w http.ResponseWriter, r *http.Request, rec *AuditRecord, f forwarded) {
	max := c.b.limits.MaxProxyBody
	if r.ContentLength > max {
		c.refuse(w, rec, refTooLarge)
		return
	}
	var body io.Reader
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		body = http.MaxBytesReader(w, r.Body, max)
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, f.target, body)
	if err != nil {
		c.refuse(w, rec, refBadPath)
		return
	}
	out.ContentLength = r.ContentLength
	copyHeaders(out.Header, r.Header, f.drop)
	// The key must be found to be masked: no compressed answers.
	out.Header.Set("Accept-Encoding", "identity")
	f.inject(out.Header)
	resp, err := c.b.hc.Do(out)
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			c.refuse(w, rec, refTooLarge)
		case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
			ref := *refUpstream
			ref.reason = "client_gone"
			c.refuse(w, rec, &ref)
		default:
			c.b.log.Warn("broker: "+f.what+" request failed", "conversation", c.id, "name", f.name, "err", redactStrings(err.Error(), f.masked))
			c.refuse(w, rec, refUpstream)
		}
		return
	}
	defer resp.Body.Close()
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		c.refuse(w, rec, refEncoded)
		return
	}
	h := w.Header()
	for k, vv := range resp.Header {
		if k == "Set-Cookie" || isHop(k) {
			continue
		}
		for _, v := range vv {
			h.Add(redactStrings(k, f.masked), redactStrings(v, f.masked))
		}
	}
	for k := range resp.Trailer {
		h.Add("Trailer", redactStrings(k, f.masked))
	}
	h.Set("Cache-Control", "no-store")
	rec.Allowed, rec.Status = true, resp.StatusCode
	w.WriteHeader(resp.StatusCode)

	cut := streamRedacted(w, r, rec, resp.Body, newRedactor(f.masked...), false)
	for k, vv := range resp.Trailer {
		for _, v := range vv {
			h.Add(redactStrings(k, f.masked), redactStrings(v, f.masked))
		}
	}
	c.b.opts.Backend.Audit(*rec)
	c.endCut(cut, rec, f.masked)
}

func isHop(k string) bool {
	for _, h := range hopHeaders {
		if k == h {
			return true
		}
	}
	return false
}

// copyHeaders copies request headers except hop-by-hop ones (including
// those the Connection header names) and credentials.
func copyHeaders(dst, src http.Header, authHeader string) {
	var connNamed []string
	for _, v := range src["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				connNamed = append(connNamed, http.CanonicalHeaderKey(f))
			}
		}
	}
	drop := func(k string) bool {
		if isHop(k) {
			return true
		}
		for _, c := range credentialHeaders {
			if k == c {
				return true
			}
		}
		for _, c := range connNamed {
			if k == c {
				return true
			}
		}
		return authHeader != "" && strings.EqualFold(k, authHeader)
	}
	for k, vv := range src {
		if !drop(k) {
			dst[k] = append([]string(nil), vv...)
		}
	}
}

// proxyRest returns the escaped path after /v1/llm/{profile}/proxy/.
func proxyRest(escaped string) (string, bool) {
	q, ok := strings.CutPrefix(escaped, "/v1/llm/")
	if !ok {
		return "", false
	}
	_, tail, ok := strings.Cut(q, "/")
	if !ok {
		return "", false
	}
	if tail == "proxy" {
		return "", true
	}
	return strings.CutPrefix(tail, "proxy/")
}

var errBadProxyPath = errors.New("bad proxy path")

// proxyTarget joins the base URL and the escaped rest of the path, and
// the queries of both. A "." or ".." segment (escaped or not), and a
// segment holding an escaped slash or backslash, are refused: the request
// must stay under the base URL, also for a provider (or a proxy in front of
// it) that decodes "%2F" before it cleans the path.
func proxyTarget(base, rest, rawQuery string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return "", errors.New("invalid base URL")
	}
	for seg := range strings.SplitSeq(rest, "/") {
		dec, err := url.PathUnescape(seg)
		if err != nil || dec == "." || dec == ".." || strings.ContainsAny(dec, "/\\") {
			return "", errBadProxyPath
		}
	}
	var b strings.Builder
	b.WriteString(u.Scheme)
	b.WriteString("://")
	b.WriteString(u.Host)
	b.WriteString(strings.TrimSuffix(u.EscapedPath(), "/"))
	b.WriteByte('/')
	b.WriteString(rest)
	q := u.RawQuery
	if rawQuery != "" {
		if q != "" {
			q += "&"
		}
		q += rawQuery
	}
	if q != "" {
		b.WriteByte('?')
		b.WriteString(q)
	}
	return b.String(), nil
}
