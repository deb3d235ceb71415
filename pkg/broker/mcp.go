package broker

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// mcpProxy serves ANY /v1/mcp/{server}/proxy: a remote MCP server's
// streamable HTTP transport, forwarded to exactly the server's URL (the
// transport has one endpoint, so the credential reaches nothing else of
// that host; a path after proxy is refused) with its credential headers
// injected, as the LLM proxy injects a key. The server's URL and headers
// stay on the host; the container names the server only. Answers stream
// (SSE), with every header's credential masked.
func (c *conversation) mcpProxy(w http.ResponseWriter, r *http.Request, rec *AuditRecord, conv *Conversation, name string) {
	if !granted(conv.Grants.MCP, name) {
		c.refuse(w, rec, notGranted(KindMCP))
		return
	}
	m, err := c.b.opts.Backend.MCPServer(r.Context(), name)
	if err != nil {
		c.backendFailed(w, rec, err, KindMCP, name)
		return
	}
	if len(r.Header["Upgrade"]) > 0 {
		c.refuse(w, rec, refUpgrade)
		return
	}
	if rest, ok := mcpRest(r.URL.EscapedPath()); !ok || rest != "" {
		c.refuse(w, rec, refBadPath)
		return
	}
	target, err := mcpTarget(m.URL, r.URL.RawQuery)
	if err != nil {
		c.b.log.Error("broker: mcp server has an invalid URL; fix it on the host", "server", name)
		c.refuse(w, rec, refInternal)
		return
	}
	var masked [][]byte
	for _, h := range m.Headers {
		masked = append(masked, maskedPart(h.Value))
	}
	c.forward(w, r, rec, forwarded{
		target: target, what: "mcp server", name: name, masked: masked,
		inject: func(out http.Header) {
			for _, h := range m.Headers {
				out.Del(h.Name)
			}
			for _, h := range m.Headers {
				out.Add(h.Name, string(h.Value))
			}
		},
	})
}

// maskedPart is what of a header value is masked in answers: the
// credential after an auth scheme ("Bearer <token>", "Basic <b64>"), else
// the whole value.
func maskedPart(v []byte) []byte {
	s := string(v)
	if scheme, cred, ok := strings.Cut(s, " "); ok && cred != "" && isToken68Scheme(scheme) {
		return []byte(strings.TrimSpace(cred))
	}
	return v
}

func isToken68Scheme(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-') {
			return false
		}
	}
	return true
}

// mcpRest returns the escaped path after /v1/mcp/{server}/proxy: "" for
// none, else what follows "proxy/".
func mcpRest(escaped string) (string, bool) {
	q, ok := strings.CutPrefix(escaped, "/v1/mcp/")
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

// mcpTarget is the server's URL exactly as configured (an MCP endpoint
// may or may not end in "/", and servers tell the two apart), with the
// caller's query joined to its own.
func mcpTarget(base, rawQuery string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return "", errors.New("invalid base URL")
	}
	if rawQuery != "" {
		if u.RawQuery != "" {
			u.RawQuery += "&"
		}
		u.RawQuery += rawQuery
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String(), nil
}
