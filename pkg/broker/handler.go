package broker

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/ohd-dev/ohd/pkg/peercred"
)

type routeID uint8

const (
	routeNone routeID = iota
	routeWhoami
	routeSecrets
	routeSecret
	routeGit
	routeLLM
	routeLLMProxy
	routeOAuth
	routeMCPProxy
	routeGitProxy
	routeEgress
	routeEgressProxy
)

// Per route: the pattern audit records carry, the grant kind, and the
// method ("" for any).
var (
	routePatterns = [...]string{
		routeNone:        "",
		routeWhoami:      "GET /v1/whoami",
		routeSecrets:     "GET /v1/secrets",
		routeSecret:      "GET /v1/secrets/{name}",
		routeGit:         "POST /v1/git-credential",
		routeLLM:         "GET /v1/llm/{profile}",
		routeLLMProxy:    "ANY /v1/llm/{profile}/proxy/{path...}",
		routeOAuth:       "GET /v1/oauth/{server}/token",
		routeMCPProxy:    "ANY /v1/mcp/{server}/proxy",
		routeGitProxy:    routeGitProxyPattern,
		routeEgress:      "GET /v1/egress/{dest}",
		routeEgressProxy: "GET /v1/egress-proxy",
	}
	routeKinds = [...]string{
		routeSecret:      KindSecret,
		routeGit:         KindGit,
		routeLLM:         KindLLM,
		routeLLMProxy:    KindLLM,
		routeOAuth:       KindOAuth,
		routeMCPProxy:    KindMCP,
		routeGitProxy:    KindGit,
		routeEgress:      KindNet,
		routeEgressProxy: KindNet,
	}
	routeMethods = [...]string{
		routeWhoami:      http.MethodGet,
		routeSecrets:     http.MethodGet,
		routeSecret:      http.MethodGet,
		routeGit:         http.MethodPost,
		routeLLM:         http.MethodGet,
		routeOAuth:       http.MethodGet,
		routeEgress:      http.MethodGet,
		routeEgressProxy: http.MethodGet,
		routeLLMProxy:    "", routeMCPProxy: "", routeGitProxy: "", // any method
	}
)

// Grant kinds, as in audit records.
const (
	KindSecret = "secret"
	KindGit    = "git"
	KindLLM    = "llm"
	KindOAuth  = "oauth"
	KindMCP    = "mcp"
	KindNet    = "net"
)

// classify maps a (decoded) path to its route and the name in it, without
// allocating.
func classify(path string) (routeID, string) {
	p, ok := strings.CutPrefix(path, "/v1/")
	if !ok {
		return routeNone, ""
	}
	switch {
	case p == "whoami":
		return routeWhoami, ""
	case p == "secrets":
		return routeSecrets, ""
	case p == "git-credential":
		return routeGit, ""
	}
	if name, ok := strings.CutPrefix(p, "secrets/"); ok {
		if name == "" || strings.IndexByte(name, '/') >= 0 {
			return routeNone, ""
		}
		return routeSecret, name
	}
	if q, ok := strings.CutPrefix(p, "llm/"); ok {
		name, tail, hasTail := strings.Cut(q, "/")
		switch {
		case name == "":
			return routeNone, ""
		case !hasTail:
			return routeLLM, name
		case tail == "proxy" || strings.HasPrefix(tail, "proxy/"):
			return routeLLMProxy, name
		}
		return routeNone, ""
	}
	if q, ok := strings.CutPrefix(p, "mcp/"); ok {
		name, tail, _ := strings.Cut(q, "/")
		if name != "" && (tail == "proxy" || strings.HasPrefix(tail, "proxy/")) {
			return routeMCPProxy, name
		}
		return routeNone, ""
	}
	if q, ok := strings.CutPrefix(p, "git/"); ok {
		host, _, _ := strings.Cut(q, "/")
		return routeGitProxy, host
	}
	if p == "egress-proxy" {
		return routeEgressProxy, ""
	}
	if name, ok := strings.CutPrefix(p, "egress/"); ok {
		if name == "" || strings.IndexByte(name, '/') >= 0 {
			return routeNone, ""
		}
		return routeEgress, name
	}
	if q, ok := strings.CutPrefix(p, "oauth/"); ok {
		name, ok := strings.CutSuffix(q, "/token")
		if !ok || name == "" || strings.IndexByte(name, '/') >= 0 {
			return routeNone, ""
		}
		return routeOAuth, name
	}
	return routeNone, ""
}

// classifyURL classifies r's path. A path with escapes that matter (an
// encoded "/" in a name) is classified in its escaped form and the name
// unescaped, so any name can be asked for.
func classifyURL(r *http.Request) (routeID, string) {
	if r.URL.RawPath == "" {
		return classify(r.URL.Path)
	}
	rt, name := classify(r.URL.RawPath)
	if rt == routeNone {
		return rt, ""
	}
	n, err := url.PathUnescape(name)
	if err != nil {
		return routeNone, ""
	}
	return rt, n
}

// ServeHTTP runs the checks every request goes through, in this order,
// and then the route: in-flight limit, rate, browser origin, the
// X-OHD-Request header, peer credentials, conversation still live, peer
// uid, token (form, conversation, epoch, MAC). Every request ends in
// exactly one audit record.
func (c *conversation) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := c.b.now()
	rt, name := classifyURL(r)
	rec := AuditRecord{
		Time:         now,
		Conversation: c.id,
		Route:        routePatterns[rt],
		Kind:         routeKinds[rt],
		Name:         name,
		PeerPID:      -1,
		PeerUID:      -1,
	}
	cred, hasCred := peercred.FromContext(r.Context())
	if hasCred {
		rec.PeerPID, rec.PeerUID = cred.PID, cred.UID
	}
	if !c.lim.acquire(rt) {
		c.refuse(w, &rec, refInFlight)
		return
	}
	defer c.lim.release(rt)
	if retry, ok := c.lim.allow(now); !ok {
		c.refuse(w, &rec, rateLimited(retry))
		return
	}
	// Fail closed: nothing is handed out whose use could not be audited.
	// The refusal's own record stays queued until the disk has room.
	if c.b.opts.Backend.AuditErr() != nil {
		c.refuse(w, &rec, refAudit)
		return
	}
	conv, ref := c.authenticate(r, cred, hasCred)
	if ref != nil {
		c.refuse(w, &rec, ref)
		return
	}
	if rt == routeNone {
		c.refuse(w, &rec, refNoRoute)
		return
	}
	if m := routeMethods[rt]; m != "" && r.Method != m {
		w.Header().Set("Allow", m)
		c.refuse(w, &rec, refMethod)
		return
	}
	switch rt {
	case routeWhoami:
		c.whoami(w, &rec, &conv)
	case routeSecrets:
		c.ok(w, &rec, jsonBody(namesBody{Names: nonNil(conv.Grants.Secrets)}))
	case routeSecret:
		c.secret(w, r, &rec, &conv, name)
	case routeGit:
		c.gitCredential(w, r, &rec, &conv)
	case routeLLM:
		c.llm(w, r, &rec, &conv, name)
	case routeLLMProxy:
		c.llmProxy(w, r, &rec, &conv, name)
	case routeOAuth:
		c.oauthToken(w, r, &rec, &conv, name)
	case routeMCPProxy:
		c.mcpProxy(w, r, &rec, &conv, name)
	case routeGitProxy:
		c.gitProxy(w, r, &rec, &conv)
	case routeEgress:
		c.egress(w, r, &rec, &conv, name)
	case routeEgressProxy:
		c.egressProxy(w, r, &rec, &conv)
	}
}

// authenticate decides whether the request may be served at all.
func (c *conversation) authenticate(r *http.Request, cred peercred.Cred, hasCred bool) (Conversation, *refusal) {
	h := r.Header
	// A browser always sends one of these on requests a page makes; no
	// agent or git needs them. (tailscale's localapi does the same.)
	if len(h["Origin"]) > 0 || len(h["Sec-Fetch-Site"]) > 0 {
		return Conversation{}, refBrowser
	}
	if v := h["X-Ohd-Request"]; len(v) != 1 || v[0] != "1" {
		return Conversation{}, refNoHeader
	}
	if !hasCred {
		return Conversation{}, refNoPeer
	}
	conv, err := c.b.opts.Backend.Conversation(r.Context(), c.id)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return Conversation{}, refEnded
		}
		c.b.log.Error("broker backend: conversation", "conversation", c.id, "err", err)
		return Conversation{}, refInternal
	}
	if cred.UID != conv.UID && cred.UID != 0 {
		return Conversation{}, refPeerUID
	}
	auth := h["Authorization"]
	if len(auth) == 0 {
		return Conversation{}, refNoToken
	}
	tok, ok := cutBearer(auth[0])
	if len(auth) != 1 || !ok {
		return Conversation{}, refMalformed
	}
	id, epoch, mac, ok := parseToken(tok)
	if !ok {
		return Conversation{}, refMalformed
	}
	if id != c.id {
		return Conversation{}, refWrongConv
	}
	if epoch != conv.Epoch {
		return Conversation{}, refStaleEpoch
	}
	if !hmac.Equal(stringBytes(mac), stringBytes(c.expectedMAC(epoch))) {
		return Conversation{}, refBadMAC
	}
	return conv, nil
}

func cutBearer(v string) (string, bool) {
	const p = "bearer "
	if len(v) <= len(p) || !strings.EqualFold(v[:len(p)], p) {
		return "", false
	}
	return strings.TrimSpace(v[len(p):]), true
}

// stringBytes views s as bytes without copying, for hmac.Equal; the bytes
// must not be modified.
func stringBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// refuse audits and answers a refused request.
func (c *conversation) refuse(w http.ResponseWriter, rec *AuditRecord, f *refusal) {
	rec.Allowed = false
	rec.Status, rec.Code, rec.Reason = f.status, f.code, f.reason
	c.b.opts.Backend.Audit(*rec)
	if rec.Route == routeGitProxyPattern {
		writeGitError(w, f)
		return
	}
	writeError(w, f)
}

// writeGitError answers a refusal of the git relay's route as text/plain,
// "ohd: <message>": git prints such a body of a failed request as
// "remote: ohd: ..." lines (it shows no other type), so the agent reads
// why (a JSON body would be dropped).
func writeGitError(w http.ResponseWriter, f *refusal) {
	h := w.Header()
	h["Content-Type"] = hvText
	h["Cache-Control"] = hvNoStore
	h["X-Content-Type-Options"] = hvNosniff
	if f.retryIn > 0 {
		h.Set("Retry-After", strconv.Itoa(f.retryIn))
	}
	w.WriteHeader(f.status)
	_, _ = io.WriteString(w, "ohd: "+f.msg+"\n")
}

// Header values shared by every answer. net/http only reads them; a
// handler that wants another value replaces the slice (Set), and append to
// a full slice copies, so sharing is safe.
var (
	hvJSON    = []string{"application/json"}
	hvText    = []string{"text/plain; charset=utf-8"}
	hvNoStore = []string{"no-store"}
	hvNosniff = []string{"nosniff"}
)

func writeError(w http.ResponseWriter, f *refusal) {
	h := w.Header()
	h["Content-Type"] = hvJSON
	h["Cache-Control"] = hvNoStore
	h["X-Content-Type-Options"] = hvNosniff
	if f.retryIn > 0 {
		h.Set("Retry-After", strconv.Itoa(f.retryIn))
	}
	var buf [256]byte
	w.WriteHeader(f.status)
	_, _ = w.Write(appendError(buf[:0], f.msg, f.code))
}

// ok audits an allowed request and writes body (JSON) with status 200.
// body is cleared afterwards: it may hold a value.
func (c *conversation) ok(w http.ResponseWriter, rec *AuditRecord, body []byte) {
	c.okType(w, rec, hvJSON, body)
}

// okType answers 200 with body. net/http computes the Content-Length of a
// small answer written at once.
func (c *conversation) okType(w http.ResponseWriter, rec *AuditRecord, contentType []string, body []byte) {
	rec.Allowed, rec.Status = true, http.StatusOK
	c.b.opts.Backend.Audit(*rec)
	h := w.Header()
	h["Content-Type"] = contentType
	h["Cache-Control"] = hvNoStore
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	clear(body)
}

type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

type namesBody struct {
	Names []string `json:"names"`
}

type whoamiBody struct {
	ID     string `json:"id"`
	Epoch  uint64 `json:"epoch"`
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	Grants Grants `json:"grants"`
}

type secretBody struct {
	Name     string `json:"name"`
	Value    string `json:"value"`
	Encoding string `json:"encoding,omitempty"` // "base64" when the value is not UTF-8
}

type llmBody struct {
	Name    string `json:"name"`
	Model   string `json:"model"`
	BaseURL string `json:"base_url"`
	APIKey  string `json:"api_key"`
}

func jsonBody(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain structs of strings and numbers are encoded.
		panic("broker: encode answer: " + err.Error())
	}
	return append(b, '\n')
}

var emptyNames = []string{}

func nonNil(s []string) []string {
	if s == nil {
		return emptyNames
	}
	return s
}

func granted(list []string, name string) bool {
	for _, g := range list {
		if g == name {
			return true
		}
	}
	return false
}

func (c *conversation) whoami(w http.ResponseWriter, rec *AuditRecord, conv *Conversation) {
	var buf [256]byte
	c.ok(w, rec, appendWhoami(buf[:0], c.id, conv))
}

func (c *conversation) secret(w http.ResponseWriter, r *http.Request, rec *AuditRecord, conv *Conversation, name string) {
	if !granted(conv.Grants.Secrets, name) {
		c.refuse(w, rec, notGranted(KindSecret))
		return
	}
	v, err := c.b.opts.Backend.Secret(r.Context(), name)
	if err != nil {
		c.backendFailed(w, rec, err, KindSecret, name)
		return
	}
	body := secretBody{Name: name, Value: string(v)}
	if !utf8.Valid(v) {
		body.Value, body.Encoding = encodeBase64(v), "base64"
	}
	c.ok(w, rec, jsonBody(body))
}

func (c *conversation) llm(w http.ResponseWriter, r *http.Request, rec *AuditRecord, conv *Conversation, name string) {
	if !granted(conv.Grants.LLM, name) {
		c.refuse(w, rec, notGranted(KindLLM))
		return
	}
	p, err := c.b.opts.Backend.LLMProfile(r.Context(), name)
	if err != nil {
		c.backendFailed(w, rec, err, KindLLM, name)
		return
	}
	if !p.AllowDisclosure {
		// The key exists but may only be injected: answer exactly as
		// for a name not granted.
		f := *notGranted(KindLLM)
		f.reason = "disclosure_not_allowed"
		c.refuse(w, rec, &f)
		return
	}
	c.ok(w, rec, jsonBody(llmBody{Name: name, Model: p.Model, BaseURL: p.BaseURL, APIKey: string(p.APIKey)}))
}

// backendFailed answers a Backend error for a granted name: ErrNotFound as
// not granted (a granted name that does not exist answers like any other
// name that is not there), anything else as internal.
func (c *conversation) backendFailed(w http.ResponseWriter, rec *AuditRecord, err error, kind, name string) {
	if errors.Is(err, ErrNotFound) {
		f := *notGranted(kind)
		f.reason = "not_found"
		c.refuse(w, rec, &f)
		return
	}
	if !errors.Is(err, context.Canceled) {
		c.b.log.Error("broker backend", "conversation", c.id, "kind", kind, "name", name, "err", err)
	}
	c.refuse(w, rec, refInternal)
}
