package broker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// GitRequest is a parsed request in git's credential-helper protocol.
type GitRequest struct {
	Protocol string // "https" or "http"
	Host     string // lower case, with ":port" if one was given
	Path     string // without leading or trailing "/"; "" unless git sends it (credential.useHttpPath)
	Username string // as git sent it, or ""
}

// Git credential actions.
const (
	GitGet   = "get"
	GitStore = "store"
	GitErase = "erase"
)

var errGitSyntax = errors.New("git credential request")

// gitRoutes are the audit routes of the three actions.
var gitRoutes = map[string]string{
	GitGet:   "POST /v1/git-credential?action=get",
	GitStore: "POST /v1/git-credential?action=store",
	GitErase: "POST /v1/git-credential?action=erase",
}

// Attributes git may send that the broker reads or tolerates. Each may
// appear once; a duplicate is ambiguous (git would take the last, a
// helper might take the first) and refused.
var gitSingleKeys = map[string]bool{
	"protocol": true, "host": true, "path": true, "username": true,
	"password": true, "password_expiry_utc": true, "oauth_refresh_token": true,
	"url": true, "authtype": true, "credential": true, "ephemeral": true,
	"continue": true, "quit": true,
}

const (
	maxHostLen = 261 // 253 for the name, ":" and a port
	maxPathLen = 4096
)

// ParseGitCredential parses a request body in git's credential-helper
// protocol ("key=value" lines, ended by a blank line or the end of input)
// with a strict policy:
//
//   - NUL or CR anywhere, a line without "=", an empty key, a key that is
//     not [a-z0-9_.-] (with an optional "[]" suffix), or anything after
//     the blank line: rejected;
//   - a key without "[]" given twice: rejected; "key[]" keys may repeat;
//   - keys the broker does not know are ignored (git adds attributes over
//     time: wwwauth[], capability[], state[], ...);
//   - url= is decomposed as git does; protocol, host and path given next to
//     it must agree with it;
//   - protocol must be https or http; host must be present, non-empty,
//     at most 261 bytes of letters, digits, ".", "-", "_", ":" or an
//     IPv6 literal in brackets; a path must not hold "." or ".." segments.
//
// Values cannot hold LF (it ends a line) and are not unescaped further.
func ParseGitCredential(body []byte) (GitRequest, error) {
	if i := bytes.IndexByte(body, 0); i >= 0 {
		return GitRequest{}, fmt.Errorf("%w: NUL byte", errGitSyntax)
	}
	if i := bytes.IndexByte(body, '\r'); i >= 0 {
		return GitRequest{}, fmt.Errorf("%w: CR byte", errGitSyntax)
	}
	var req GitRequest
	var rawURL string
	seen := make(map[string]bool, 8)
	rest := body
	for len(rest) > 0 {
		var line []byte
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			line, rest = rest, nil
		}
		if len(line) == 0 {
			if len(rest) != 0 {
				return GitRequest{}, fmt.Errorf("%w: data after the blank line", errGitSyntax)
			}
			break
		}
		k, v, ok := bytes.Cut(line, []byte("="))
		if !ok {
			return GitRequest{}, fmt.Errorf("%w: line without '='", errGitSyntax)
		}
		key := string(k)
		if !validGitKey(key) {
			return GitRequest{}, fmt.Errorf("%w: invalid key %q", errGitSyntax, truncate(key, 40))
		}
		if !strings.HasSuffix(key, "[]") {
			if seen[key] {
				return GitRequest{}, fmt.Errorf("%w: key %q given twice", errGitSyntax, key)
			}
			seen[key] = true
		}
		switch key {
		case "protocol":
			req.Protocol = string(v)
		case "host":
			req.Host = string(v)
		case "path":
			req.Path = string(v)
		case "username":
			req.Username = string(v)
		case "url":
			rawURL = string(v)
		}
	}
	if rawURL != "" {
		if err := req.mergeURL(rawURL, seen); err != nil {
			return GitRequest{}, err
		}
	}
	switch req.Protocol {
	case "https", "http":
	case "":
		return GitRequest{}, fmt.Errorf("%w: missing protocol", errGitSyntax)
	default:
		return GitRequest{}, fmt.Errorf("%w: protocol %q not supported (https or http)", errGitSyntax, truncate(req.Protocol, 20))
	}
	if req.Host == "" {
		return GitRequest{}, fmt.Errorf("%w: missing or empty host", errGitSyntax)
	}
	if !validGitHost(req.Host) {
		return GitRequest{}, fmt.Errorf("%w: invalid host", errGitSyntax)
	}
	req.Host = strings.ToLower(req.Host)
	if len(req.Path) > maxPathLen {
		return GitRequest{}, fmt.Errorf("%w: path too long", errGitSyntax)
	}
	req.Path = strings.Trim(req.Path, "/")
	for seg := range strings.SplitSeq(req.Path, "/") {
		if seg == "." || seg == ".." {
			return GitRequest{}, fmt.Errorf("%w: path with a %q segment", errGitSyntax, seg)
		}
	}
	return req, nil
}

// mergeURL fills protocol, host, path and username from url= as git does.
func (req *GitRequest) mergeURL(raw string, seen map[string]bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		return fmt.Errorf("%w: invalid url", errGitSyntax)
	}
	if u.Host == "" {
		return fmt.Errorf("%w: url without a host", errGitSyntax)
	}
	set := func(key string, field *string, v string) error {
		// url= is percent-decoded: "%00" or "%0A" would smuggle in what
		// the line syntax refuses.
		if strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf("%w: CR, LF or NUL in the url's %s", errGitSyntax, key)
		}
		if seen[key] && *field != v {
			return fmt.Errorf("%w: url and %s disagree", errGitSyntax, key)
		}
		*field = v
		return nil
	}
	if err := set("protocol", &req.Protocol, u.Scheme); err != nil {
		return err
	}
	if err := set("host", &req.Host, u.Host); err != nil {
		return err
	}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" || seen["path"] {
		if err := set("path", &req.Path, p); err != nil {
			return err
		}
	}
	if u.User != nil {
		if err := set("username", &req.Username, u.User.Username()); err != nil {
			return err
		}
	}
	return nil
}

func validGitKey(k string) bool {
	k = strings.TrimSuffix(k, "[]")
	if k == "" || len(k) > 64 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func validGitHost(h string) bool {
	if len(h) > maxHostLen {
		return false
	}
	name := h
	if strings.HasPrefix(h, "[") { // [v6]:port
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return false
		}
		for i := 1; i < end; i++ {
			c := h[i]
			if !(isHex(c) || c == ':' || c == '.') {
				return false
			}
		}
		name = ""
		if rest := h[end+1:]; rest != "" {
			port, ok := strings.CutPrefix(rest, ":")
			if !ok || !validPort(port) {
				return false
			}
		}
	} else if i := strings.IndexByte(h, ':'); i >= 0 {
		name = h[:i]
		if !validPort(h[i+1:]) || name == "" {
			return false
		}
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func validPort(p string) bool {
	if p == "" || len(p) > 5 {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// gitGrant returns whether a Git grant list lets req through: an entry
// "host" grants every path on host; "host/prefix" grants paths equal to
// prefix or below it on a segment boundary ("acme" grants "acme/widgets"
// but not "acme-corp/x"), and only when git sends the path
// (credential.useHttpPath). A trailing ".git" is ignored on both sides.
func gitGrant(grants []string, req GitRequest) bool {
	path := strings.TrimSuffix(req.Path, ".git")
	for _, g := range grants {
		gh, gp, _ := strings.Cut(g, "/")
		if !strings.EqualFold(gh, req.Host) {
			continue
		}
		gp = strings.TrimSuffix(strings.Trim(gp, "/"), ".git")
		if gp == "" {
			return true
		}
		if path == gp || strings.HasPrefix(path, gp) && len(path) > len(gp) && path[len(gp)] == '/' {
			return true
		}
	}
	return false
}

// gitName is what audit records name for a request: host, or host/path.
func (req GitRequest) gitName() string {
	if req.Path == "" {
		return req.Host
	}
	return req.Host + "/" + req.Path
}

// gitCredential serves POST /v1/git-credential?action=get|store|erase.
// get answers username= and password= lines for a granted host; store and
// erase are checked, audited and acknowledged with an empty answer, and
// change nothing: operators own credentials (ohctl secret ... on the host).
func (c *conversation) gitCredential(w http.ResponseWriter, r *http.Request, rec *AuditRecord, conv *Conversation) {
	action := r.URL.Query().Get("action")
	switch action {
	case GitGet, GitStore, GitErase:
	default:
		c.refuse(w, rec, badRequest("action must be get, store or erase"))
		return
	}
	rec.Route = gitRoutes[action]
	max := c.b.limits.MaxBody
	if r.ContentLength > max {
		c.refuse(w, rec, refTooLarge)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			c.refuse(w, rec, refTooLarge)
			return
		}
		c.refuse(w, rec, badRequest("reading the request body failed"))
		return
	}
	req, err := ParseGitCredential(body)
	clear(body) // a store request carries a password
	if err != nil {
		c.refuse(w, rec, badRequest(err.Error()))
		return
	}
	rec.Name = req.gitName()
	if !gitGrant(conv.Grants.Git, req) {
		c.refuse(w, rec, notGranted(KindGit))
		return
	}
	if action != GitGet {
		c.okType(w, rec, hvText, nil)
		return
	}
	if !helperGrant(conv.Grants, req) {
		// The host is served through the relay, which injects the
		// credential: git inside never gets it (DESIGN §5).
		rec.Detail = "relay: no password handed out"
		c.okType(w, rec, hvText, nil)
		return
	}
	cred, err := c.b.opts.Backend.GitCredential(r.Context(), req.Host)
	if err != nil {
		c.backendFailed(w, rec, err, KindGit, req.gitName())
		return
	}
	if strings.ContainsAny(cred.Username, "\x00\r\n") || bytes.ContainsAny(cred.Password, "\x00\r\n") {
		c.b.log.Error("broker: stored git credential holds NUL, CR or LF; fix it on the host", "host", req.Host)
		c.refuse(w, rec, refInternal)
		return
	}
	if req.Username != "" && cred.Username != "" && req.Username != cred.Username {
		c.refuse(w, rec, refGitUsername)
		return
	}
	var out []byte
	if cred.Username != "" {
		out = append(out, "username="...)
		out = append(out, cred.Username...)
		out = append(out, '\n')
	}
	out = append(out, "password="...)
	out = append(out, cred.Password...)
	out = append(out, '\n')
	c.okType(w, rec, hvText, out)
}

// helperGrant reports whether one of the grants that let req through is
// served through the credential helper (--git-relay=false).
func helperGrant(g Grants, req GitRequest) bool {
	for _, name := range gitMatches(g.Git, req) {
		if g.GitOptions[name].Helper {
			return true
		}
	}
	return false
}
