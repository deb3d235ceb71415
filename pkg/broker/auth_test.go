package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/broker"
)

// TestAuthorizationMatrix sends one request per way of being refused (and
// the granted one) and checks the status, the error code, and the audit
// record of each.
func TestAuthorizationMatrix(t *testing.T) {
	e := newEnv(t)
	me, myGID := os.Geteuid(), os.Getegid()
	grants := broker.Grants{Secrets: []string{"granted", "granted-missing"}}
	a := e.open(broker.Conversation{ID: "conv-a", UID: me, GID: myGID, Epoch: 1, Grants: grants})
	b := e.open(broker.Conversation{ID: "conv-b", UID: me, GID: myGID, Epoch: 1, Grants: grants})
	r := e.open(broker.Conversation{ID: "conv-r", UID: me, GID: myGID, Epoch: 1, Grants: grants})
	ended := e.open(broker.Conversation{ID: "conv-e", UID: me, GID: myGID, Epoch: 1, Grants: grants})
	e.be.SetSecret("granted", []byte("v-"+marker+"-granted"))
	e.be.SetSecret("not-granted", []byte("v-"+marker+"-other"))

	tokA := e.token("conv-a", 1)
	tokR1 := e.token("conv-r", 1)
	// Rotation: the store bumps the epoch first, then the token is
	// rewritten.
	e.be.SetConversation(broker.Conversation{ID: "conv-r", UID: me, GID: myGID, Epoch: 2, Grants: grants})
	if err := e.b.WriteToken("conv-r", 2, me, myGID); err != nil {
		t.Fatal(err)
	}
	e.be.EndConversation("conv-e")

	otherKey := broker.DeriveKey([]byte("another master key"))
	badMAC := broker.Token(otherKey, "conv-a", 1)
	without := func(h http.Header, k string) http.Header {
		h = h.Clone()
		h.Del(k)
		return h
	}
	with := func(h http.Header, k, v string) http.Header {
		h = h.Clone()
		h.Set(k, v)
		return h
	}

	const secretRoute = "GET /v1/secrets/{name}"
	type want struct {
		status         int
		code, reason   string
		route, kind    string
		name, conv     string
		allowed        bool
		bodyHas        string
		sameAnswerAs   string // the name of an earlier case whose answer must be identical
		peerUIDIsOther bool
	}
	cases := []struct {
		name   string
		socket string
		path   string
		hdr    http.Header
		// asUID, when set, sends the request from a process running as
		// that uid (root only).
		asUID int
		want  want
	}{
		{
			name: "no token", socket: a.Socket, path: "/v1/whoami",
			hdr:  http.Header{"X-Ohd-Request": {"1"}},
			want: want{status: 401, code: "unauthenticated", reason: "no_token", route: "GET /v1/whoami", conv: "conv-a"},
		},
		{
			name: "malformed token", socket: a.Socket, path: "/v1/whoami",
			hdr:  authed("ohd1.conv-a.1.not-a-mac"),
			want: want{status: 401, code: "unauthenticated", reason: "malformed_token", route: "GET /v1/whoami", conv: "conv-a"},
		},
		{
			name: "not a bearer token", socket: a.Socket, path: "/v1/whoami",
			hdr:  with(authed(tokA), "Authorization", "Basic "+tokA),
			want: want{status: 401, code: "unauthenticated", reason: "malformed_token", route: "GET /v1/whoami", conv: "conv-a"},
		},
		{
			name: "token of A on B's socket", socket: b.Socket, path: "/v1/whoami",
			hdr:  authed(tokA),
			want: want{status: 401, code: "unauthenticated", reason: "wrong_conversation", route: "GET /v1/whoami", conv: "conv-b"},
		},
		{
			name: "old epoch after rotation", socket: r.Socket, path: "/v1/whoami",
			hdr:  authed(tokR1),
			want: want{status: 401, code: "unauthenticated", reason: "stale_epoch", route: "GET /v1/whoami", conv: "conv-r", sameAnswerAs: "token of A on B's socket"},
		},
		{
			name: "wrong MAC", socket: a.Socket, path: "/v1/whoami",
			hdr:  authed(badMAC),
			want: want{status: 401, code: "unauthenticated", reason: "bad_mac", route: "GET /v1/whoami", conv: "conv-a", sameAnswerAs: "token of A on B's socket"},
		},
		{
			name: "missing X-OHD-Request", socket: a.Socket, path: "/v1/whoami",
			hdr:  without(authed(tokA), "X-Ohd-Request"),
			want: want{status: 401, code: "unauthenticated", reason: "missing_request_header", route: "GET /v1/whoami", conv: "conv-a"},
		},
		{
			name: "X-OHD-Request not 1", socket: a.Socket, path: "/v1/whoami",
			hdr:  with(authed(tokA), "X-Ohd-Request", "true"),
			want: want{status: 401, code: "unauthenticated", reason: "missing_request_header", route: "GET /v1/whoami", conv: "conv-a"},
		},
		{
			name: "browser Origin", socket: a.Socket, path: "/v1/whoami",
			hdr:  with(authed(tokA), "Origin", "https://evil.example"),
			want: want{status: 401, code: "unauthenticated", reason: "browser_origin", route: "GET /v1/whoami", conv: "conv-a"},
		},
		{
			name: "browser Sec-Fetch-Site", socket: a.Socket, path: "/v1/whoami",
			hdr:  with(authed(tokA), "Sec-Fetch-Site", "cross-site"),
			want: want{status: 401, code: "unauthenticated", reason: "browser_origin", route: "GET /v1/whoami", conv: "conv-a"},
		},
		{
			name: "conversation ended", socket: ended.Socket, path: "/v1/whoami",
			hdr:  authed(e.token("conv-e", 1)),
			want: want{status: 401, code: "unauthenticated", reason: "conversation_ended", route: "GET /v1/whoami", conv: "conv-e"},
		},
		{
			name: "client running as another uid", path: "/v1/whoami", asUID: testenv.UnprivilegedUID,
			want: want{status: 401, code: "unauthenticated", reason: "peer_uid", route: "GET /v1/whoami", conv: "conv-u", peerUIDIsOther: true},
		},
		{
			name: "name not granted", socket: a.Socket, path: "/v1/secrets/not-granted",
			hdr:  authed(tokA),
			want: want{status: 403, code: "not_granted", reason: "not_granted", route: secretRoute, kind: "secret", name: "not-granted", conv: "conv-a"},
		},
		{
			name: "name that does not exist", socket: a.Socket, path: "/v1/secrets/no-such-secret",
			hdr:  authed(tokA),
			want: want{status: 403, code: "not_granted", reason: "not_granted", route: secretRoute, kind: "secret", name: "no-such-secret", conv: "conv-a", sameAnswerAs: "name not granted"},
		},
		{
			name: "granted name that does not exist", socket: a.Socket, path: "/v1/secrets/granted-missing",
			hdr:  authed(tokA),
			want: want{status: 403, code: "not_granted", reason: "not_found", route: secretRoute, kind: "secret", name: "granted-missing", conv: "conv-a", sameAnswerAs: "name not granted"},
		},
		{
			name: "unknown route", socket: a.Socket, path: "/v1/nope",
			hdr:  authed(tokA),
			want: want{status: 404, code: "not_found", reason: "no_route", conv: "conv-a"},
		},
		{
			name: "wrong method", socket: a.Socket, path: "/v1/whoami",
			hdr:  authed(tokA),
			want: want{status: 405, code: "bad_request", reason: "method", route: "GET /v1/whoami", conv: "conv-a"},
		},
		{
			name: "granted", socket: a.Socket, path: "/v1/secrets/granted",
			hdr:  authed(tokA),
			want: want{status: 200, route: secretRoute, kind: "secret", name: "granted", conv: "conv-a", allowed: true, bodyHas: `"value":"v-` + marker + `-granted"`},
		},
	}
	answers := map[string]string{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var status int
			var body []byte
			wantPeerUID := me
			var asOther func() (int, []byte)
			if tc.asUID != 0 {
				asOther = otherUIDRequest(t, e, tc.asUID)
			}
			n := e.auditCount()
			switch {
			case asOther != nil:
				status, body = asOther()
				wantPeerUID = tc.asUID
			default:
				method := http.MethodGet
				if tc.want.reason == "method" {
					method = http.MethodPost
				}
				resp, b := e.request(tc.socket, method, tc.path, tc.hdr, nil)
				status, body = resp.StatusCode, b
			}
			if status != tc.want.status {
				t.Fatalf("status = %d, want %d; body %s", status, tc.want.status, body)
			}
			if tc.want.code != "" {
				wantBody := fmt.Sprintf(`"code":%q`, tc.want.code)
				if !bytes.Contains(body, []byte(wantBody)) || !bytes.Contains(body, []byte(`"error":`)) {
					t.Errorf("body = %s, want an error with %s", body, wantBody)
				}
			}
			if tc.want.bodyHas != "" && !bytes.Contains(body, []byte(tc.want.bodyHas)) {
				t.Errorf("body = %s, want it to contain %s", body, tc.want.bodyHas)
			}
			answers[tc.name] = string(body)
			if other := tc.want.sameAnswerAs; other != "" && answers[other] != string(body) {
				t.Errorf("answer %q differs from the answer to %q: %q", body, other, answers[other])
			}
			got := e.audit(n + 1)
			if got.PeerPID <= 0 {
				t.Errorf("audit PeerPID = %d, want a pid", got.PeerPID)
			}
			wantRec := broker.AuditRecord{
				Conversation: tc.want.conv,
				Route:        tc.want.route,
				Kind:         tc.want.kind,
				Name:         tc.want.name,
				PeerUID:      wantPeerUID,
				Allowed:      tc.want.allowed,
				Status:       tc.want.status,
				Code:         tc.want.code,
				Reason:       tc.want.reason,
			}
			if diff := cmp.Diff(wantRec, got, cmpopts.IgnoreFields(broker.AuditRecord{}, "Time", "PeerPID")); diff != "" {
				t.Errorf("audit record mismatch (-want +got):\n%s", diff)
			}
			if n2 := e.auditCount(); n2 != n+1 {
				t.Errorf("%d audit records for one request, want 1", n2-n)
			}
		})
	}
}

// otherUIDRequest prepares a GET /v1/whoami of conversation conv-u (uid
// 1001) from a process running as uid, with the valid token, and returns a
// function that sends it and returns the status and body. The conversation's directory and socket are opened up
// for other users, so that nothing but the SO_PEERCRED check stands
// between uid and the broker; the same request as uid 1001 must succeed.
func otherUIDRequest(t *testing.T, e *env, uid int) func() (int, []byte) {
	t.Helper()
	testenv.RequireRoot(t)
	const convUID = testenv.UnprivilegedUID + 1
	ep := e.open(broker.Conversation{ID: "conv-u", UID: convUID, GID: convUID, Epoch: 3})
	if err := os.Chmod(ep.Dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ep.Socket, 0o666); err != nil {
		t.Fatal(err)
	}
	for p := filepath.Dir(ep.Dir); p != "/"; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, st.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := testenv.TempDir(t)
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := copyTestBinary(t, tmp)
	tokFile := filepath.Join(tmp, "token")
	if err := os.WriteFile(tokFile, []byte(e.token("conv-u", 3)), 0o444); err != nil {
		t.Fatal(err)
	}
	run := func(uid int) (int, []byte) {
		cmd := testenv.AsUser(exec.Command(exe), uid, uid)
		cmd.Env = []string{helperEnv + "=whoami", broker.EnvSocket + "=" + ep.Socket, broker.EnvTokenFile + "=" + tokFile}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("whoami as uid %d: %v: %s", uid, err, stderr.Bytes())
		}
		s, body, _ := strings.Cut(string(out), " ")
		status, _ := strconv.Atoi(s)
		return status, []byte(body)
	}
	// Control: the conversation's own uid gets through the same way.
	n := e.auditCount()
	if status, body := run(convUID); status != http.StatusOK {
		t.Fatalf("whoami as the conversation's uid %d: %d %s, want 200", convUID, status, body)
	}
	e.audit(n + 1)
	return func() (int, []byte) { return run(uid) }
}

// TestNamesWithSlashes: a name holding "/" (escaped by the client) is
// looked up whole.
func TestNamesWithSlashes(t *testing.T) {
	e := newEnv(t)
	ep := e.open(broker.Conversation{ID: "conv-a", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1,
		Grants: broker.Grants{Secrets: []string{"team/npm token"}}})
	e.be.SetSecret("team/npm token", []byte("v-"+marker))
	e.be.SetSecret("team", []byte("v-"+marker+"-team"))
	got, err := e.client(ep).Secret(context.Background(), "team/npm token")
	if err != nil || string(got) != "v-"+marker {
		t.Errorf("Secret(team/npm token) = %q, %v", got, err)
	}
	if _, err := e.client(ep).Secret(context.Background(), "team"); !errors.Is(err, broker.ErrNotGranted) {
		t.Errorf("Secret(team) = %v, want ErrNotGranted", err)
	}
	resp, _ := e.request(ep.Socket, http.MethodGet, "/v1/secrets/team/npm%20token", authed(e.token("conv-a", 1)), nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unescaped slash = %d, want 404 (no such route)", resp.StatusCode)
	}
}
