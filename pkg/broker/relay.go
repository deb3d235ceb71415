package broker

import (
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Relay is the conversation's broker as plain HTTP, for programs inside
// the container that cannot speak to a Unix socket with a token: the
// inner agent server's LLM client (a base_url), its LookupSecrets (a url)
// and its MCP clients (a remote server's url). ohctl inner-exec serves it on the container's loopback
// (RelayAddr); every request becomes a broker request on the socket, with
// the token read from its file each time, so the broker checks, limits
// and audits each use, and a revoked grant fails the next one.
//
//	ANY /llm/{profile}/{path...}   → ANY /v1/llm/{profile}/proxy/{path...} (query kept), streamed
//	ANY /mcp/{server}              → ANY /v1/mcp/{server}/proxy (query kept), streamed; a longer path is refused
//	GET /secrets/{name}            → GET /v1/secrets/{name}; the raw value as text/plain
//	ANY /git/{host}/{path...}      → ANY /v1/git/{host}/{path...} (query kept), streamed both ways (gitrelay.go)
//
// The relay holds no credential: the caller's Authorization and x-api-key
// (a placeholder) are dropped by the broker, which injects the real key
// (or an MCP server's headers).
// A request to another Host than RelayAddr (or localhost on its port), or
// one with an Origin or Sec-Fetch-* header (a browser's), is refused with
// 403 before it reaches the broker: see refuseForged.
// An error of the broker keeps its status and body (JSON; text/plain
// on the git route, which git shows); an LLM
// provider's answer, errors included, passes as the provider sent it.
type Relay struct {
	c *Client
	// ErrorLog, when set, says which answer was cut and why (the
	// container's log): the client only sees its connection end.
	ErrorLog *log.Logger
}

// RelayAddr is where ohctl inner-exec serves the Relay inside a
// container: loopback only, so no other container and no host process
// reaches it.
const RelayAddr = "127.0.0.1:8751"

// NewRelay returns a Relay forwarding to the broker through c.
func NewRelay(c *Client) *Relay { return &Relay{c: c} }

// ServeHTTP implements http.Handler.
func (rl *Relay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if msg := refuseForged(r); msg != "" {
		relayError(w, http.StatusForbidden, CodeNotGranted, msg)
		return
	}
	p := r.URL.EscapedPath()
	switch {
	case strings.HasPrefix(p, "/llm/"):
		rl.llm(w, r, strings.TrimPrefix(p, "/llm/"))
	case strings.HasPrefix(p, "/mcp/"):
		rl.mcp(w, r, strings.TrimPrefix(p, "/mcp/"))
	case strings.HasPrefix(p, "/secrets/"):
		rl.secret(w, r, strings.TrimPrefix(p, "/secrets/"))
	case strings.HasPrefix(p, "/git/"):
		rl.proxy(w, r, "/v1/git/"+strings.TrimPrefix(p, "/git/"))
	default:
		relayError(w, http.StatusNotFound, "not_found", "the broker relay serves /llm/{profile}/..., /mcp/{server}, /secrets/{name} and /git/{host}/{repository}/...")
	}
}

// refuseForged says why r cannot be the inner server's own request, or ""
// when it can. The relay adds the broker's token itself, so the broker's
// own guard against forged requests (X-OHD-Request, DESIGN §5) does not
// protect it: a browser in the container could be steered to it by DNS
// rebinding (Host attacker.tld:8751) or by a cross-site page. The inner
// server's clients name the relay by its address (Host 127.0.0.1:8751 or
// localhost:8751) and send no Origin or Sec-Fetch-* header; a browser
// always sends one of those with a cross-origin or rebinding request.
func refuseForged(r *http.Request) string {
	if !relayHost(r.Host) {
		return "the broker relay answers only requests to " + RelayAddr + " or localhost:" + relayPort + " (Host " + strconv.Quote(r.Host) + " refused)"
	}
	for _, h := range []string{"Origin", "Sec-Fetch-Site", "Sec-Fetch-Mode"} {
		if _, ok := r.Header[h]; ok {
			return "the broker relay refuses browser requests (" + h + " header present)"
		}
	}
	return ""
}

// relayPort is RelayAddr's port.
var relayPort = func() string {
	_, port, _ := net.SplitHostPort(RelayAddr)
	return port
}()

func relayHost(host string) bool {
	h, port, err := net.SplitHostPort(host)
	if err != nil || port != relayPort {
		return false
	}
	return h == "127.0.0.1" || strings.EqualFold(h, "localhost")
}

func (rl *Relay) llm(w http.ResponseWriter, r *http.Request, rest string) {
	profile, tail, _ := strings.Cut(rest, "/")
	if profile == "" {
		relayError(w, http.StatusNotFound, "not_found", "no LLM profile in the path: use /llm/{profile}/...")
		return
	}
	rl.proxy(w, r, "/v1/llm/"+profile+"/proxy/"+tail)
}

func (rl *Relay) mcp(w http.ResponseWriter, r *http.Request, rest string) {
	server, tail, hasTail := strings.Cut(rest, "/")
	if server == "" {
		relayError(w, http.StatusNotFound, "not_found", "no MCP server in the path: use /mcp/{server}")
		return
	}
	p := "/v1/mcp/" + server + "/proxy"
	if hasTail {
		p += "/" + tail
	}
	rl.proxy(w, r, p)
}

// proxy forwards r to the broker's escaped path p and streams the answer.
func (rl *Relay) proxy(w http.ResponseWriter, r *http.Request, p string) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	u := &url.URL{Path: p, RawQuery: r.URL.RawQuery}
	if dec, err := url.PathUnescape(u.Path); err == nil {
		u.RawPath, u.Path = u.Path, dec
	}
	out.URL = u
	// The caller's credentials are the placeholder the inner server was
	// given; the broker drops them and injects the profile's key.
	out.Header.Del("Authorization")
	out.Header.Del("X-Api-Key")
	bulk := strings.HasPrefix(p, "/v1/git/")
	if r.ContentLength == 0 {
		out.Body = nil
	} else if bulk {
		out.Body = bulkBody{r.Body}
	}
	resp, err := rl.c.Do(out)
	if err != nil {
		relayError(w, http.StatusBadGateway, "bad_gateway", "the conversation's broker is unreachable")
		return
	}
	defer resp.Body.Close()
	h := w.Header()
	for k, vv := range resp.Header {
		if !isHop(k) {
			h[k] = vv
		}
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	// git's packs come in large reads, flushed when the stream pauses (a
	// short read); anything else is flushed after every read.
	var buf []byte
	if bulk {
		// Pooled: 256 KiB for each of git's requests (a fetch makes several).
		b := bulkBufs.Get().(*[GitStreamBuffer]byte)
		defer bulkBufs.Put(b)
		buf = b[:]
	} else {
		buf = make([]byte, 32<<10)
	}
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if !bulk || n < len(buf) {
				_ = rc.Flush()
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				if rl.ErrorLog != nil {
					rl.ErrorLog.Printf("the broker's answer to %s %s was cut: %v", r.Method, p, rerr)
				}
				panic(http.ErrAbortHandler) // a cut stream must not look whole
			}
			return
		}
	}
}

func (rl *Relay) secret(w http.ResponseWriter, r *http.Request, escaped string) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		relayError(w, http.StatusMethodNotAllowed, "bad_request", "use GET")
		return
	}
	name, err := url.PathUnescape(escaped)
	if err != nil || name == "" || strings.Contains(name, "/") {
		relayError(w, http.StatusNotFound, "not_found", "no such secret")
		return
	}
	v, err := rl.c.Secret(r.Context(), name)
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) {
			relayError(w, ae.Status, ae.Code, ae.Message)
			return
		}
		relayError(w, http.StatusBadGateway, "bad_gateway", "the conversation's broker is unreachable")
		return
	}
	defer clear(v)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(v)
}

func relayError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(appendError(nil, msg, code))
}
