package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/peercred"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/version"
)

// rawBodyKey carries a request's unbounded body to handleExec.
type rawBodyKey struct{}

// maxControlBody bounds a control request body (a secret value is at most
// store.MaxSecretSize).
const maxControlBody = store.MaxSecretSize + 4096

// controlHandler serves the control API (see package control).
func (d *Daemon) controlHandler() http.Handler {
	mux := http.NewServeMux()
	h := func(pattern string, fn func(w http.ResponseWriter, r *http.Request) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := fn(w, r); err != nil {
				d.writeError(w, r, err)
			}
		})
	}
	h("GET /v1/version", d.handleVersion)
	h("GET /v1/pulls", d.handlePulls)
	h("GET /v1/conversations", d.handleList)
	h("POST /v1/conversations", d.handleCreate)
	h("GET /v1/conversations/{id}", d.handleGet)
	h("DELETE /v1/conversations/{id}", d.handleRemove)
	h("POST /v1/conversations/{id}/grants", d.handleGrant)
	h("DELETE /v1/conversations/{id}/grants/{kind}/{name}", d.handleRevoke)
	h("POST /v1/conversations/{id}/token/rotate", d.handleRotate)
	h("GET /v1/conversations/{id}/logs", d.handleLogs)
	h("POST /v1/conversations/{id}/exec", d.handleExec)
	h("POST /v1/conversations/{id}/restore", d.handleRestore)
	h("POST /v1/prune", d.handlePrune)
	h("GET /v1/doctor", d.handleDoctor)
	h("POST /v1/doctor", d.handleDoctor)
	h("GET /v1/secrets", d.handleSecrets)
	h("PUT /v1/secrets/{name}", d.handleSetSecret)
	h("DELETE /v1/secrets/{name}", d.handleRemoveSecret)
	h("GET /v1/git-credentials", d.handleGitCredentials)
	h("PUT /v1/git-credentials/{host}", d.handlePutGitCredential)
	h("DELETE /v1/git-credentials/{host}", d.handleRemoveGitCredential)
	h("GET /v1/llm-profiles", d.handleLLMProfiles)
	h("PUT /v1/llm-profiles/{name}", d.handlePutLLMProfile)
	h("DELETE /v1/llm-profiles/{name}", d.handleRemoveLLMProfile)
	h("GET /v1/oauth-servers", d.handleOAuthServers)
	h("PUT /v1/oauth-servers/{name}", d.handlePutOAuthServer)
	h("DELETE /v1/oauth-servers/{name}", d.handleRemoveOAuthServer)
	h("GET /v1/audit", d.handleAudit)
	mux.Handle("GET /v1/metrics", d.metrics.Handler())
	h("/", func(w http.ResponseWriter, r *http.Request) error {
		return badRequest(control.CodeNotFound, "no control route %s %s: see `ohctl --help`", r.Method, r.URL.Path)
	})
	return d.guard(mux)
}

// guard admits only the daemon's own uid and root (SO_PEERCRED), and no
// browser: a page that reaches the socket through some proxy cannot set
// these headers away.
func (d *Daemon) guard(next http.Handler) http.Handler {
	self := os.Geteuid()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cred, ok := peercred.FromContext(r.Context())
		if !ok || (cred.UID != self && cred.UID != 0) {
			uid := -1
			if ok {
				uid = cred.UID
			}
			d.log.Warn("control socket: refused a client of another uid", "uid", uid, "route", r.Method+" "+r.URL.Path)
			d.store.AuditAsync(store.AuditRecord{Time: time.Now().UTC(), Source: "control", Route: r.Method + " " + r.URL.Path, PeerPID: cred.PID, PeerUID: uid, Status: http.StatusForbidden, Code: control.CodeForbidden})
			writeJSON(w, http.StatusForbidden, control.Error{Message: fmt.Sprintf("uid %d may not use the control socket: only the daemon's uid (%d) and root may", uid, self), Code: control.CodeForbidden})
			return
		}
		if r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" {
			writeJSON(w, http.StatusForbidden, control.Error{Message: "browser requests are refused on the control socket", Code: control.CodeForbidden})
			return
		}
		// exec streams its input: it may read the raw body.
		r = r.WithContext(context.WithValue(r.Context(), rawBodyKey{}, r.Body))
		r.Body = http.MaxBytesReader(w, r.Body, maxControlBody)
		next.ServeHTTP(w, r)
	})
}

// apiError is an error with its HTTP code.
type apiError struct {
	code string
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(code, format string, args ...any) error {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

var statusOf = map[string]int{
	control.CodeBadRequest: http.StatusBadRequest, control.CodeForbidden: http.StatusForbidden,
	control.CodeNotFound: http.StatusNotFound, control.CodeConflict: http.StatusConflict,
	control.CodeTooLarge: http.StatusRequestEntityTooLarge, control.CodeUnavailable: http.StatusServiceUnavailable,
	control.CodeInternal: http.StatusInternalServerError,
}

// ErrorCode maps an error of the conversation layer to a control code.
func ErrorCode(err error) string {
	var ae *apiError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae.code
	case errors.As(err, &mbe):
		return control.CodeTooLarge
	case errors.Is(err, conversation.ErrInvalid):
		return control.CodeBadRequest
	case errors.Is(err, conversation.ErrNotFound), errors.Is(err, store.ErrNotFound):
		return control.CodeNotFound
	case errors.Is(err, conversation.ErrConflict), errors.Is(err, store.ErrExists):
		return control.CodeConflict
	case errors.Is(err, runtime.ErrEngineUnavailable):
		return control.CodeUnavailable
	case errors.Is(err, runtime.ErrNotFound):
		// An image that does not exist: the operator's configuration.
		return control.CodeBadRequest
	}
	var se *conversation.StepError
	if errors.As(err, &se) {
		return control.CodeInternal
	}
	return control.CodeInternal
}

func (d *Daemon) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := ErrorCode(err)
	e := control.Error{Message: err.Error(), Code: code}
	var se *conversation.StepError
	if errors.As(err, &se) {
		e.Step = se.Step
	}
	if code == control.CodeTooLarge {
		e.Message = fmt.Sprintf("%s %s: the request body is too large: the limit is %d bytes", r.Method, r.URL.Path, maxControlBody)
	}
	if code == control.CodeInternal {
		d.log.Error("control request failed", "route", r.Method+" "+r.URL.Path, "err", err)
	}
	writeJSON(w, statusOf[code], e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// decode reads a JSON body strictly: unknown fields and trailing data are
// errors, so a typo does not silently do something else.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return badRequest(control.CodeBadRequest, "bad request body: %v", err)
	}
	if dec.More() {
		return badRequest(control.CodeBadRequest, "bad request body: more than one JSON value")
	}
	return nil
}

func (d *Daemon) handleVersion(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, control.Version{
		Version: version.Version, APIVersion: version.APIVersion, Runtime: d.rt.Kind(),
		ServerID: d.store.ServerID(), StateDir: d.cfg.StateDir,
	})
	return nil
}

// handlePulls lists the image pulls in progress: ohctl polls it while a
// create waits, to show the pull's progress.
func (d *Daemon) handlePulls(w http.ResponseWriter, _ *http.Request) error {
	out := []control.Pull{}
	for _, p := range d.rt.Pulls() {
		cp := control.Pull{Image: p.Image, Started: p.Started.UTC(), Status: p.Status, Layers: make([]control.PullLayer, len(p.Layers))}
		for i, l := range p.Layers {
			cp.Layers[i] = control.PullLayer{ID: l.ID, Status: l.Status, Downloaded: l.Downloaded, Size: l.Size, Done: l.Done}
		}
		out = append(out, cp)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (d *Daemon) handleList(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, d.store.Conversations())
	return nil
}

func (d *Daemon) handleCreate(w http.ResponseWriter, r *http.Request) error {
	var req control.CreateRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	conv, err := d.mgr.Create(r.Context(), conversation.CreateRequest{
		ID: req.ID, Workspace: req.Repo, Worktree: req.Worktree, StartPoint: req.StartPoint, Grants: req.Grants,
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, conv)
	return nil
}

func pathID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !store.ValidID(id) {
		return "", badRequest(control.CodeBadRequest, "conversation id %q is not a UUID (8-4-4-4-12 lower-case hex digits): see `ohctl ls`", id)
	}
	return id, nil
}

func (d *Daemon) handleGet(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	c, err := d.store.Conversation(id)
	if err != nil {
		return fmt.Errorf("conversation %s: %w: see `ohctl ls`", id, conversation.ErrNotFound)
	}
	c.EngineStalls = d.mgr.StallsOf(c)
	writeJSON(w, http.StatusOK, c)
	return nil
}

func boolQuery(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest(control.CodeBadRequest, "query %s=%q: want true or false", name, v)
	}
	return b, nil
}

func (d *Daemon) handleRemove(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	discard, err := boolQuery(r, "discard")
	if err != nil {
		return err
	}
	c, err := d.mgr.Remove(r.Context(), id, conversation.RemoveOptions{Discard: discard})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

func (d *Daemon) handleGrant(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var req control.GrantRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	grant := d.mgr.Grant
	if req.Kind == store.KindGit && (len(req.Push) > 0 || req.GitRelay != nil) {
		opt := store.GitGrantOptions{Push: req.Push, Helper: req.GitRelay != nil && !*req.GitRelay}
		grant = func(id, _, name string) (store.Conversation, error) { return d.mgr.GrantGit(id, name, opt) }
	}
	c, err := grant(id, req.Kind, req.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

func (d *Daemon) handleRevoke(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	c, err := d.mgr.Revoke(id, r.PathValue("kind"), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

func (d *Daemon) handleRotate(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	c, err := d.mgr.RotateToken(id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

// containerOf returns the container of a conversation, or an error that
// says why there is none.
func (d *Daemon) containerOf(id string) (string, error) {
	c, err := d.mgr.Get(id)
	if err != nil {
		return "", err
	}
	if c.Runtime == "local" {
		return "", badRequest(control.CodeConflict, "conversation %s runs in the local runtime: it has no container", id)
	}
	if c.ContainerID == "" {
		return "", badRequest(control.CodeConflict, "conversation %s has no container (state %s)", id, c.State)
	}
	return c.ContainerID, nil
}

// flushWriter flushes after every write, for streamed answers.
type flushWriter struct {
	mu sync.Mutex
	w  io.Writer
	f  http.Flusher
}

func (fw *flushWriter) Write(p []byte) (int, error) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	n, err := fw.w.Write(p)
	fw.f.Flush()
	return n, err
}

func (d *Daemon) handleLogs(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	follow, err := boolQuery(r, "follow")
	if err != nil {
		return err
	}
	cid, err := d.containerOf(id)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	fw := &flushWriter{w: w, f: w.(http.Flusher)}
	if err := d.rt.Logs(r.Context(), cid, follow, fw, fw); err != nil && r.Context().Err() == nil {
		fmt.Fprintf(fw, "\nohd: logs ended: %v\n", err)
	}
	return nil
}

// execWriter sends output as ExecFrame lines.
type execWriter struct {
	stream string
	enc    *json.Encoder
	mu     *sync.Mutex
	f      http.Flusher
}

func (e execWriter) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.enc.Encode(control.ExecFrame{Stream: e.stream, Data: p}); err != nil {
		return 0, err
	}
	e.f.Flush()
	return len(p), nil
}

func (d *Daemon) handleExec(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	// The body is the request, then (with Stdin) the command's input: it
	// is not bounded like other bodies, and is read while the answer is
	// written.
	r.Body = r.Context().Value(rawBodyKey{}).(io.ReadCloser)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var req control.ExecRequest
	if err := dec.Decode(&req); err != nil {
		return badRequest(control.CodeBadRequest, "bad request body: %v", err)
	}
	var stdin io.Reader
	if req.Stdin {
		stdin = io.MultiReader(dec.Buffered(), r.Body)
		// Drop the newline after the JSON value.
		br := bufio.NewReader(stdin)
		if b, err := br.Peek(1); err == nil && b[0] == '\n' {
			_, _ = br.Discard(1)
		}
		stdin = br
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			return fmt.Errorf("exec: %w", err)
		}
	}
	if len(req.Cmd) == 0 {
		return badRequest(control.CodeBadRequest, "exec: no command: pass it after --, e.g. ohctl exec ID -- git status")
	}
	if req.WorkDir != "" && !filepath.IsAbs(req.WorkDir) {
		return badRequest(control.CodeBadRequest, "exec --workdir %q: want an absolute path inside the container", req.WorkDir)
	}
	if req.Size != nil && !req.TTY {
		return badRequest(control.CodeBadRequest, "exec: a window size is only for a terminal: ask for one with tty (ohctl exec -t)")
	}
	// Counted as starting until it returns or has had time to start: a
	// removal freezes the container only once no exec is starting, and
	// refuses new ones (a command started after the freeze would run on,
	// its work unsaved).
	started, err := d.mgr.BeginExec(id)
	if err != nil {
		return err
	}
	defer started()
	if _, err := d.mgr.Target(r.Context(), id); err != nil {
		return err
	}
	cid, err := d.containerOf(id)
	if err != nil {
		return err
	}
	c, _ := d.mgr.Get(id)
	workdir := c.WorkingDir
	if req.WorkDir != "" {
		workdir = req.WorkDir
	}
	var resize chan runtime.TermSize
	if req.TTY && stdin != nil {
		var stop func()
		stdin, resize, stop = ttyInput(stdin)
		defer stop()
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	f := w.(http.Flusher)
	opts := runtime.ExecOptions{
		User: req.User, Stdin: stdin,
		WorkingDir: workdir,
		TTY:        req.TTY,
		Resize:     resize,
		Stdout:     execWriter{"stdout", enc, &mu, f},
		Stderr:     execWriter{"stderr", enc, &mu, f},
	}
	if req.Size != nil {
		opts.Size = runtime.TermSize{Rows: req.Size.Rows, Cols: req.Size.Cols}
	}
	// As the agent (the container's user), under the agent server's
	// seccomp filter: see Manager.LimitedCmd.
	c.ContainerID = cid
	code, err := d.rt.Exec(r.Context(), cid, d.mgr.LimitedCmd(r.Context(), c, req.Cmd, req.User), opts)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		return enc.Encode(control.ExecFrame{Error: "exec: " + err.Error()})
	}
	return enc.Encode(control.ExecFrame{ExitCode: &code})
}

// ttyInput splits an exec's input with TTY (control.ExecInput lines) into
// the bytes typed, read from the returned reader, and the window sizes,
// sent on the returned channel. stop, called when the command has ended,
// makes the splitting goroutine drop whatever still comes; that goroutine
// ends when in does (the client closes its request body once it has the
// exit code), as the runtime's copy of stdin does.
func ttyInput(in io.Reader) (io.Reader, chan runtime.TermSize, func()) {
	pr, pw := io.Pipe()
	sizes := make(chan runtime.TermSize)
	done := make(chan struct{})
	go func() {
		dec := json.NewDecoder(in)
		for {
			var m control.ExecInput
			if err := dec.Decode(&m); err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				_ = pw.CloseWithError(err)
				return
			}
			if len(m.Data) > 0 {
				if _, err := pw.Write(m.Data); err != nil {
					return
				}
			}
			if m.Size != nil {
				select {
				case sizes <- runtime.TermSize{Rows: m.Size.Rows, Cols: m.Size.Cols}:
				case <-done:
					return
				}
			}
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			close(done)
			_ = pr.CloseWithError(io.ErrClosedPipe)
		})
	}
	return pr, sizes, stop
}

func (d *Daemon) handleRestore(w http.ResponseWriter, r *http.Request) error {
	var req control.RestoreRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	res, err := d.mgr.Restore(r.Context(), r.PathValue("id"), req.Into)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (d *Daemon) handlePrune(w http.ResponseWriter, r *http.Request) error {
	var req control.PruneRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	var older time.Duration
	if req.OlderThan != "" {
		var err error
		if older, err = time.ParseDuration(req.OlderThan); err != nil || older < 0 {
			return badRequest(control.CodeBadRequest, "older than %q: want a duration such as 72h or 30m", req.OlderThan)
		}
	}
	rep, err := d.mgr.Prune(r.Context(), conversation.PruneOptions{DryRun: req.DryRun, OlderThan: older, WorktreeRoot: d.cfg.WorktreeRoot})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

func (d *Daemon) handleDoctor(w http.ResponseWriter, r *http.Request) error {
	id := r.URL.Query().Get("id")
	if id != "" && !store.ValidID(id) {
		return badRequest(control.CodeBadRequest, "conversation id %q is not a UUID", id)
	}
	repair, err := boolQuery(r, "repair")
	if err != nil {
		return err
	}
	if repair && r.Method != http.MethodPost {
		return badRequest(control.CodeBadRequest, "repair needs POST")
	}
	var rep control.DoctorReport
	if repo := r.URL.Query().Get("repo"); repo != "" {
		if id != "" {
			return badRequest(control.CodeBadRequest, "doctor takes an id or a repo, not both")
		}
		rep, err = d.mgr.DoctorRepo(r.Context(), repo, repair)
	} else {
		rep, err = d.mgr.Doctor(r.Context(), id, repair)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

func (d *Daemon) handleSecrets(w http.ResponseWriter, _ *http.Request) error {
	s, err := d.store.Secrets()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nonNil(s))
	return nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func validName(what, name string) error {
	if !store.ValidName(name) {
		return badRequest(control.CodeBadRequest, "%s name %q: use 1-128 characters of A-Z a-z 0-9 . _ - (not starting with . or -)", what, name)
	}
	return nil
}

func (d *Daemon) handleSetSecret(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := validName("secret", name); err != nil {
		return err
	}
	value, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	if len(value) == 0 {
		return badRequest(control.CodeBadRequest, "secret %s: empty value: pipe the value on standard input", name)
	}
	if len(value) > store.MaxSecretSize {
		return badRequest(control.CodeTooLarge, "secret %s: value is %d bytes, the limit is %d", name, len(value), store.MaxSecretSize)
	}
	if err := d.store.SetSecret(name, value); err != nil {
		return err
	}
	d.log.Info("secret set", "name", name)
	writeJSON(w, http.StatusOK, map[string]string{"name": name})
	return nil
}

func (d *Daemon) handleRemoveSecret(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := validName("secret", name); err != nil {
		return err
	}
	if err := d.store.DeleteSecret(name); err != nil {
		return err
	}
	d.log.Info("secret removed", "name", name)
	writeJSON(w, http.StatusOK, map[string]string{"name": name})
	return nil
}

func (d *Daemon) handleGitCredentials(w http.ResponseWriter, _ *http.Request) error {
	l, err := d.store.GitCredentials()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nonNil(l))
	return nil
}

func (d *Daemon) handlePutGitCredential(w http.ResponseWriter, r *http.Request) error {
	var g store.GitCredential
	if err := decode(r, &g); err != nil {
		return err
	}
	// The broker asks for hosts lower-cased (with :port when given).
	g.Host = r.PathValue("host")
	if err := conversation.ValidateGitHost(&g); err != nil {
		return err
	}
	if g.Username == "" || strings.ContainsAny(g.Username, "\r\n\x00") {
		return badRequest(control.CodeBadRequest, "git credential %s: --username is required and must be one line", g.Host)
	}
	if err := validName("secret", g.Secret); err != nil {
		return err
	}
	if err := d.store.PutGitCredential(g); err != nil {
		return err
	}
	d.mgr.RefreshGitRelayConfigs()
	writeJSON(w, http.StatusOK, g)
	return nil
}

func (d *Daemon) handleRemoveGitCredential(w http.ResponseWriter, r *http.Request) error {
	if err := d.store.DeleteGitCredential(r.PathValue("host")); err != nil {
		return err
	}
	d.mgr.RefreshGitRelayConfigs()
	writeJSON(w, http.StatusOK, map[string]string{"host": r.PathValue("host")})
	return nil
}

func (d *Daemon) handleLLMProfiles(w http.ResponseWriter, _ *http.Request) error {
	l, err := d.store.LLMProfiles()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nonNil(l))
	return nil
}

func (d *Daemon) handlePutLLMProfile(w http.ResponseWriter, r *http.Request) error {
	var p store.LLMProfile
	if err := decode(r, &p); err != nil {
		return err
	}
	p.Name = r.PathValue("name")
	if err := validName("llm profile", p.Name); err != nil {
		return err
	}
	if err := validName("secret", p.KeySecret); err != nil {
		return err
	}
	if err := checkURL("base URL", p.BaseURL); err != nil {
		return err
	}
	if err := d.store.PutLLMProfile(p); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

func checkURL(what, s string) error {
	if !strings.HasPrefix(s, "https://") && !strings.HasPrefix(s, "http://") {
		return badRequest(control.CodeBadRequest, "%s %q: want an http(s) URL", what, s)
	}
	return nil
}

func (d *Daemon) handleRemoveLLMProfile(w http.ResponseWriter, r *http.Request) error {
	if err := d.store.DeleteLLMProfile(r.PathValue("name")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"name": r.PathValue("name")})
	return nil
}

func (d *Daemon) handleOAuthServers(w http.ResponseWriter, _ *http.Request) error {
	l, err := d.store.OAuthServers()
	if err != nil {
		return err
	}
	for i := range l {
		l[i].Access, l[i].Refresh = nil, nil // sealed, but nothing a client needs
	}
	writeJSON(w, http.StatusOK, nonNil(l))
	return nil
}

func (d *Daemon) handlePutOAuthServer(w http.ResponseWriter, r *http.Request) error {
	var req control.OAuthServerRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	o := req.OAuthServer
	o.Name = r.PathValue("name")
	o.Access, o.Refresh = nil, nil
	if err := validName("oauth server", o.Name); err != nil {
		return err
	}
	if err := checkURL("token URL", o.TokenURL); err != nil {
		return err
	}
	if o.ClientSecret != "" {
		if err := validName("secret", o.ClientSecret); err != nil {
			return err
		}
	}
	if err := d.store.PutOAuthServer(o, req.RefreshToken); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"name": o.Name})
	return nil
}

func (d *Daemon) handleRemoveOAuthServer(w http.ResponseWriter, r *http.Request) error {
	if err := d.store.DeleteOAuthServer(r.PathValue("name")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"name": r.PathValue("name")})
	return nil
}

func (d *Daemon) handleAudit(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := store.AuditFilter{Conversation: q.Get("conversation")}
	if f.Conversation != "" && !store.ValidID(f.Conversation) {
		return badRequest(control.CodeBadRequest, "conversation id %q is not a UUID", f.Conversation)
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return badRequest(control.CodeBadRequest, "limit %q: want a non-negative integer", v)
		}
		f.Limit = n
	}
	recs, err := d.store.Audit(f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nonNil(recs))
	return nil
}
