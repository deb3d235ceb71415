package broker

import (
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/ohd-dev/ohd/pkg/gitproto"
)

// GitOptions are a git grant's options (Grants.GitOptions).
type GitOptions struct {
	// Push lists ref patterns a push may create or update besides the
	// conversation's own branches (pushPolicy): "*" matches any
	// characters, "/" included.
	Push []string
	// Helper marks a grant served through the credential helper
	// (--git-relay=false): git-credential get answers the password for
	// it. Otherwise it answers none, and git reaches the host through the
	// relay, which injects the credential.
	Helper bool
}

// MaxCommandList bounds a receive-pack command list (the refs of one
// push, before the pack): 1 MiB holds about 8000 ref updates.
const MaxCommandList = 1 << 20

// GitStreamBuffer is the size of the reads with which the broker and the
// relay copy git's answers: packs are large, and each write is a chunk.
const GitStreamBuffer = 256 << 10

// maxRefusedPushDrain bounds what the broker reads (and discards) of a
// refused push's pack before it answers.
const maxRefusedPushDrain = 4 << 30

const routeGitProxyPattern = "ANY /v1/git/{host}/{path...}"

var (
	refGitPath     = &refusal{http.StatusBadRequest, CodeBadRequest, "not a git smart-HTTP request ohd relays: use {host}/{repository}/info/refs?service=git-upload-pack|git-receive-pack, .../git-upload-pack or .../git-receive-pack, with no '.', '..', empty or percent-encoded segments", "bad_path", 0}
	refGitRedirect = &refusal{http.StatusBadGateway, CodeBadGateway, "the git host answered with a redirect; ohd does not follow redirects with the credential: fix the repository URL", "redirect", 0}
	refGitAuth     = &refusal{http.StatusBadGateway, CodeBadGateway, "the git host refused ohd's credential for this host; the operator must check it (ohctl git-host ls)", "upstream_unauthorized", 0}
	refGitUpstream = &refusal{http.StatusBadGateway, CodeBadGateway, "the git host is unreachable or failed", "upstream_error", 0}
)

// gitTarget is a parsed relay request: host, repository path and the
// smart-HTTP endpoint.
type gitTarget struct {
	host, repo, endpoint, query string
	receivePack                 bool // a POST .../git-receive-pack
}

// parseGitPath checks the escaped path after /v1/git/ and the query: only
// git's smart-HTTP endpoints, and nothing that a server (or a proxy in
// front of it) could resolve to another repository.
func parseGitPath(rest, rawQuery, method string) (gitTarget, bool) {
	if rest == "" || len(rest) > maxHostLen+maxPathLen {
		return gitTarget{}, false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if c <= ' ' || c >= 0x7f || c == '%' || c == '\\' || c == '?' || c == '#' {
			return gitTarget{}, false
		}
	}
	segs := strings.Split(rest, "/")
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return gitTarget{}, false
		}
	}
	if len(segs) < 3 || !validGitHost(segs[0]) {
		return gitTarget{}, false
	}
	t := gitTarget{host: strings.ToLower(segs[0])}
	n := len(segs)
	switch {
	case n >= 4 && segs[n-2] == "info" && segs[n-1] == "refs" && method == http.MethodGet &&
		(rawQuery == "service=git-upload-pack" || rawQuery == "service=git-receive-pack"):
		t.endpoint, t.query, t.repo = "info/refs", rawQuery, strings.Join(segs[1:n-2], "/")
	case segs[n-1] == "git-upload-pack" && method == http.MethodPost && rawQuery == "":
		t.endpoint, t.repo = segs[n-1], strings.Join(segs[1:n-1], "/")
	case segs[n-1] == "git-receive-pack" && method == http.MethodPost && rawQuery == "":
		t.endpoint, t.repo, t.receivePack = segs[n-1], strings.Join(segs[1:n-1], "/"), true
	default:
		return gitTarget{}, false
	}
	return t, t.repo != ""
}

// gitMatches returns the Git grants that let req through (gitGrant's
// rule), in grant order.
func gitMatches(grants []string, req GitRequest) []string {
	var out []string
	for _, g := range grants {
		if gitGrant([]string{g}, req) {
			out = append(out, g)
		}
	}
	return out
}

// gitProxy serves ANY /v1/git/{host}/{path...}: git's smart-HTTP protocol
// forwarded to the granted host with the credential injected, both ways
// streamed; a push's command list is read first and refused in git's own
// words when it updates a ref the grant does not allow.
func (c *conversation) gitProxy(w http.ResponseWriter, r *http.Request, rec *AuditRecord, conv *Conversation) {
	rec.Route, rec.Kind = routeGitProxyPattern, KindGit
	rest, _ := strings.CutPrefix(r.URL.EscapedPath(), "/v1/git/")
	t, ok := parseGitPath(rest, r.URL.RawQuery, r.Method)
	if !ok {
		c.refuse(w, rec, refGitPath)
		return
	}
	req := GitRequest{Host: t.host, Path: t.repo}
	rec.Name = req.gitName()
	matches := gitMatches(conv.Grants.Git, req)
	if len(matches) == 0 {
		// git shows this text (text/plain, writeGitError) on a clone or
		// fetch; it names only what the agent asked for.
		f := *notGranted(KindGit)
		f.msg = rec.Name + " is not granted to this conversation; on the host run: ohctl grant " + c.id + " git " + strings.TrimSuffix(rec.Name, ".git")
		c.refuse(w, rec, &f)
		return
	}
	cred, err := c.b.opts.Backend.GitCredential(r.Context(), t.host)
	if err != nil {
		c.backendFailed(w, rec, err, KindGit, rec.Name)
		return
	}
	scheme := cred.Scheme
	if scheme == "" {
		scheme = "https"
	}
	if scheme != "https" && scheme != "http" {
		c.b.log.Error("broker: git host has an invalid scheme; fix it on the host", "host", t.host)
		c.refuse(w, rec, refInternal)
		return
	}
	target := scheme + "://" + t.host + "/" + t.repo + "/" + t.endpoint
	if t.query != "" {
		target += "?" + t.query
	}
	var body io.Reader
	var verdict pushVerdict
	var sideband gitproto.Sideband
	maxLines := 0 // > 0: the host's report is read, for verdict.record
	contentLength := r.ContentLength
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		body = r.Body
	}
	encoding := r.Header.Get("Content-Encoding")
	if t.receivePack {
		if body == nil {
			c.refuse(w, rec, badRequest("a push without a command list"))
			return
		}
		// The command list must be read as git-receive-pack will: a
		// gzip body is decoded here and forwarded decoded.
		switch strings.ToLower(encoding) {
		case "", "identity":
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(body)
			if err != nil {
				c.refuse(w, rec, badRequest("the push's gzip body is invalid"))
				return
			}
			defer zr.Close()
			body, encoding, contentLength = zr, "", -1
		default:
			c.refuse(w, rec, badRequest("a push body in Content-Encoding "+truncate(encoding, 20)+" cannot be checked; send it unencoded or gzip"))
			return
		}
		list, raw, err := gitproto.ReadCommandList(body, MaxCommandList)
		if err != nil {
			switch {
			case errors.Is(err, gitproto.ErrTooLarge):
				c.refuse(w, rec, &refusal{http.StatusRequestEntityTooLarge, CodeTooLarge, "the push's command list is over ohd's limit of 1 MiB: push fewer refs at once", "push_too_large", 0})
			default:
				c.refuse(w, rec, &refusal{http.StatusBadRequest, CodeBadRequest, "the push's command list is invalid: " + err.Error(), "push_invalid", 0})
			}
			return
		}
		verdict, err = c.pushVerdict(r.Context(), conv, t, matches, list)
		if err != nil {
			c.backendFailed(w, rec, err, KindGit, rec.Name)
			return
		}
		rec.Detail = verdict.detail()
		if verdict.refused() {
			c.refusePush(w, r, rec, list, verdict)
			return
		}
		if len(verdict.record) > 0 && (list.Has("report-status") || list.Has("report-status-v2")) {
			// Without report-status (git always asks it) the host says
			// nothing of what it did, and nothing is recorded.
			sideband, maxLines = gitproto.SidebandOf(list), 8*len(list.Commands)+8
		}
		if len(list.Commands) == 0 {
			// git's probe before a large push: the lone flush goes on,
			// and nothing after it.
			_, _ = io.CopyN(io.Discard, body, maxRefusedPushDrain)
			body, contentLength, encoding = strings.NewReader(string(raw)), int64(len(raw)), ""
		} else {
			body = io.MultiReader(strings.NewReader(string(raw)), body)
		}
	}
	outBody := body
	if _, small := body.(*strings.Reader); body != nil && !small {
		// (A strings.Reader stays as it is: the transport may resend it.)
		outBody = bulkBody{io.NopCloser(body)}
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, target, outBody)
	if err != nil {
		c.refuse(w, rec, refGitPath)
		return
	}
	out.ContentLength = contentLength
	if body == nil {
		out.ContentLength = 0
	}
	copyHeaders(out.Header, r.Header, "")
	out.Header.Del("Content-Length")
	if encoding == "" {
		out.Header.Del("Content-Encoding")
	}
	// Answers unencoded, so the credential can be masked in them.
	out.Header.Set("Accept-Encoding", "identity")
	// The token is masked in answers as sent and as Basic carries it.
	masked := [][]byte{cred.Password}
	if cred.Bearer {
		out.Header.Set("Authorization", "Bearer "+string(cred.Password))
	} else {
		basic := base64.StdEncoding.EncodeToString([]byte(cred.Username + ":" + string(cred.Password)))
		out.Header.Set("Authorization", "Basic "+basic)
		masked = append(masked, []byte(basic))
	}
	resp, err := c.b.hc.Do(out)
	if err != nil {
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			ref := *refGitUpstream
			ref.reason = "client_gone"
			c.refuse(w, rec, &ref)
			return
		}
		c.b.log.Warn("broker: git host request failed", "conversation", c.id, "host", t.host, "err", redactStrings(err.Error(), masked))
		c.refuse(w, rec, refGitUpstream)
		return
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		// The client would follow it to wherever the server says, and
		// the relay would have to send the credential there: neither.
		c.refuse(w, rec, refGitRedirect)
		return
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusProxyAuthRequired:
		// Passed on, git would ask its credential helper for the relay's
		// own address.
		c.refuse(w, rec, refGitAuth)
		return
	}
	var report *reportWatch
	if maxLines > 0 && resp.StatusCode == http.StatusOK {
		report = watchReport(resp, sideband, maxLines)
	}
	cut := c.stream(w, r, rec, resp, masked)
	if report != nil {
		c.recordCreated(r.Context(), rec, t, verdict.record, report.wait())
	}
	c.b.opts.Backend.Audit(*rec)
	c.endCut(cut, rec, masked)
}

// stream copies an upstream answer to w: headers but hop-by-hop ones,
// cookies and authentication challenges, then the body, flushed after
// every read, the credential masked. The caller audits rec, then ends a
// cut stream (the error returned) with endCut.
func (c *conversation) stream(w http.ResponseWriter, r *http.Request, rec *AuditRecord, resp *http.Response, masked [][]byte) error {
	h := w.Header()
	for k, vv := range resp.Header {
		if k == "Set-Cookie" || k == "Www-Authenticate" || isHop(k) {
			continue
		}
		for _, v := range vv {
			h.Add(redactStrings(k, masked), redactStrings(v, masked))
		}
	}
	h.Set("Cache-Control", "no-store")
	rec.Allowed, rec.Status = true, resp.StatusCode
	w.WriteHeader(resp.StatusCode)
	red := newRedactor(masked...)
	red.buf = make([]byte, len(red.buf)-redactBufSize+GitStreamBuffer)
	// A read that fills the buffer has more behind it: flush when the host
	// pauses (a short read), as for progress lines, not after every read
	// of a pack.
	return streamRedacted(w, r, rec, resp.Body, red, true)
}

// pushVerdict is the policy's answer for each ref of a push.
type pushVerdict struct {
	refs    []gitproto.RefStatus // Reason "" = allowed
	atomic  bool
	anyBad  bool
	refName string   // the grant to name in the hint
	record  []string // refs that become the conversation's when the host reports them updated
}

func (v pushVerdict) refused() bool { return v.anyBad }

// detail names the refs asked, allowed and refused, for the audit record.
func (v pushVerdict) detail() string {
	var asked, allowed, refused []string
	for _, r := range v.refs {
		asked = append(asked, r.Ref)
		if r.Reason == "" {
			allowed = append(allowed, r.Ref)
		} else {
			refused = append(refused, r.Ref)
		}
	}
	if v.anyBad {
		allowed = nil // the push is refused whole
	}
	return truncate("push asked="+strings.Join(asked, ",")+" allowed="+strings.Join(allowed, ",")+" refused="+strings.Join(refused, ","), 4000)
}

// pushVerdict applies the push policy (pushPolicy) of the matching
// grants to every command, asking the Backend who created the branches
// under OpenHandsBranches the push updates.
func (c *conversation) pushVerdict(ctx context.Context, conv *Conversation, t gitTarget, matches []string, l *gitproto.CommandList) (pushVerdict, error) {
	p := pushPolicy{id: c.id, grant: matches[0]}
	for _, g := range matches {
		p.patterns = append(p.patterns, conv.Grants.GitOptions[g].Push...)
	}
	var ask []string
	for _, cmd := range l.Commands {
		if p.needsCreator(cmd) && !matchAny(p.patterns, cmd.Ref) {
			ask = append(ask, cmd.Ref)
		}
	}
	if len(ask) > 0 {
		var err error
		if p.creators, err = c.b.opts.Backend.GitBranchCreators(ctx, t.host, t.repo, ask); err != nil {
			return pushVerdict{}, err
		}
	}
	v := pushVerdict{atomic: l.Has("atomic"), refName: matches[0]}
	for _, cmd := range l.Commands {
		reason, record := p.check(cmd)
		if reason != "" {
			v.anyBad = true
		}
		if record {
			v.record = append(v.record, cmd.Ref)
		}
		v.refs = append(v.refs, gitproto.RefStatus{Ref: cmd.Ref, Reason: reason})
	}
	if v.anyBad {
		// A push is refused whole, so that what reaches the host is
		// exactly what the client asked for or nothing.
		v.record = nil
		for i := range v.refs {
			if v.refs[i].Reason == "" {
				if v.atomic {
					v.refs[i].Reason = "ohd: atomic push refused: another ref in it is not granted"
				} else {
					v.refs[i].Reason = "ohd: push refused whole: another ref in it is not granted"
				}
			}
		}
	}
	return v, nil
}

// reportWatch reads the host's report-status as the answer streams past
// it to git (a tee into a pipe), so the relay learns which refs the host
// updated without holding the answer back.
type reportWatch struct {
	pw   *io.PipeWriter
	body io.Reader // the tee
	done chan reportResult
}

type reportResult struct {
	rep *gitproto.Report
	err error
}

// watchReport tees resp's body into a reader of its report-status.
func watchReport(resp *http.Response, sb gitproto.Sideband, maxLines int) *reportWatch {
	pr, pw := io.Pipe()
	rw := &reportWatch{pw: pw, body: io.TeeReader(resp.Body, pw), done: make(chan reportResult, 1)}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{rw.body, resp.Body}
	go func() {
		rep, err := gitproto.ReadReport(pr, sb, maxLines)
		// Whatever follows (or all of it, after an error) is read and
		// dropped, so the tee never blocks.
		_, _ = io.Copy(io.Discard, pr)
		rw.done <- reportResult{rep, err}
	}()
	return rw
}

// wait reads what git did not (a client that went away leaves the
// report unread: the host's updates stand all the same), ends the tee
// and returns the report.
func (rw *reportWatch) wait() reportResult {
	_, err := io.CopyN(io.Discard, rw.body, maxRefusedPushDrain)
	if err == nil {
		err = errors.New("the host's answer is over the limit")
	}
	if err == io.EOF {
		err = nil
	}
	rw.pw.CloseWithError(err)
	return <-rw.done
}

// recordCreated records, of refs (the push's creations that would make
// a branch this conversation's), those the host reported updated, and
// notes them in the audit record. A push whose report cannot be read
// records nothing: the branch is then not the conversation's to update.
func (c *conversation) recordCreated(ctx context.Context, rec *AuditRecord, t gitTarget, refs []string, res reportResult) {
	if res.err != nil {
		c.b.log.Warn("broker: the git host's report of a push is unreadable; the branches it created are not recorded", "conversation", c.id, "host", t.host, "err", res.err)
		rec.Detail = truncate(rec.Detail+" created=? (report unreadable)", 4000)
		return
	}
	var created []string
	for _, ref := range refs {
		if res.rep.OK(ref) {
			created = append(created, ref)
		}
	}
	if len(created) == 0 {
		return
	}
	// The push's context may have ended with git's connection; the
	// host's update stands, so its record must be written all the same.
	if err := c.b.opts.Backend.RecordGitBranches(context.WithoutCancel(ctx), c.id, t.host, t.repo, created); err != nil {
		c.b.log.Error("broker: recording the branches a push created", "conversation", c.id, "host", t.host, "err", err)
		rec.Detail = truncate(rec.Detail+" created=? (not recorded)", 4000)
		return
	}
	rec.Detail = truncate(rec.Detail+" created="+strings.Join(created, ","), 4000)
}

// refusePush answers a refused push as git-receive-pack would, after
// reading (and discarding) the rest of the request, so the client reads
// the answer instead of a broken pipe.
func (c *conversation) refusePush(w http.ResponseWriter, r *http.Request, rec *AuditRecord, l *gitproto.CommandList, v pushVerdict) {
	// Bounded: a client that keeps sending is cut off (the answer may
	// then not reach it; nothing reached the host either way).
	_, _ = io.CopyN(io.Discard, r.Body, maxRefusedPushDrain)
	rec.Allowed, rec.Status, rec.Code, rec.Reason = false, http.StatusOK, CodeNotGranted, "push_not_granted"
	c.b.opts.Backend.Audit(*rec)
	h := w.Header()
	h.Set("Content-Type", "application/x-git-receive-pack-result")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(gitproto.AppendReport(nil, "ok", v.refs, gitproto.SidebandOf(l)))
}

// matchAny reports whether ref matches one of the patterns: "*" matches
// any run of characters ("/" included), everything else itself.
func matchAny(patterns []string, ref string) bool {
	for _, p := range patterns {
		if globMatch(p, ref) {
			return true
		}
	}
	return false
}

func globMatch(p, s string) bool {
	star, next := -1, 0
	i, j := 0, 0
	for j < len(s) {
		switch {
		case i < len(p) && p[i] == '*':
			star, next = i, j
			i++
		case i < len(p) && p[i] == s[j]:
			i++
			j++
		case star >= 0:
			next++
			i, j = star+1, next
		default:
			return false
		}
	}
	for i < len(p) && p[i] == '*' {
		i++
	}
	return i == len(p)
}

// ValidPushPattern reports whether p may be a grant's push pattern: a ref
// name under refs/, where "*" may stand for any characters.
func ValidPushPattern(p string) bool {
	return gitproto.ValidRefName(strings.ReplaceAll(p, "*", "x"))
}

// GitRelayConfig is the git setting that sends git's requests for
// scheme://host/ through the relay inside the container:
// url.http://127.0.0.1:8751/git/HOST/.insteadOf = SCHEME://HOST/ (scheme
// "" is https).
func GitRelayConfig(scheme, host string) [2]string {
	if scheme == "" {
		scheme = "https"
	}
	return [2]string{"url.http://" + RelayAddr + "/git/" + url.PathEscape(host) + "/.insteadOf", scheme + "://" + host + "/"}
}

// bodyWriteBuffer is the write buffer of the broker's and the relay's
// HTTP clients: a chunked request body is flushed after every chunk, and
// a chunk (git's curl sends up to 64 KiB) that fits the buffer with its
// header and CRLF takes one write to the socket instead of three.
const bodyWriteBuffer = 64<<10 + 64

// bulkBody is a request body forwarded in GitStreamBuffer pieces: the
// transport copies a body through its WriteTo, so each read of a push's
// pack becomes one chunk on the wire (a chunked request body is flushed
// after every chunk) instead of one per 32 KiB, each of them three
// writes to the socket.
type bulkBody struct{ io.ReadCloser }

var bulkBufs = sync.Pool{New: func() any { return new([GitStreamBuffer]byte) }}

// WriteTo copies the body to w, one write per read.
func (b bulkBody) WriteTo(w io.Writer) (int64, error) {
	buf := bulkBufs.Get().(*[GitStreamBuffer]byte)
	defer bulkBufs.Put(buf)
	var total int64
	for {
		n, rerr := b.Read(buf[:])
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}
