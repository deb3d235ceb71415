package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestBackendConversationVSCodeAndDesktop: the URLs a conversation's agent server
// hands out for VS Code (port 8001) and the desktop (8002) become ohd's,
// reach that container's ports through ohd, carry a token instead of the
// inner key, and need it; turned off in the server, they answer a message
// naming the flag.
func TestBackendConversationVSCodeAndDesktop(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		testenv.RequireRoot(t)
		d := b.daemon(t, "--inner-env", "OH_ENABLE_VNC=true")
		repo := testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: 1000, GID: 1000}})
		id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"kind": "LocalWorkspace", "working_dir": repo}})
		k, err := os.ReadFile(filepath.Join(d.record(id).BrokerDir, "session-api-key"))
		innerKey := strings.TrimSpace(string(k))
		if err != nil || innerKey == "" {
			t.Fatalf("the inner key: %v", err)
		}

		urlOf := func(svc string) *url.URL {
			t.Helper()
			r := d.call("GET", "/api/"+svc+"/url?cid="+id, nil)
			if strings.Contains(string(r.Body), innerKey) {
				t.Fatalf("GET /api/%s/url answered the inner session key: %s", svc, r.Body)
			}
			var ans struct{ URL string }
			r.json(t, &ans)
			u, err := url.Parse(ans.URL)
			if r.Status != 200 || err != nil || u.Host != d.listen || !strings.HasPrefix(u.Path, "/ohd/conversations/"+id+"/"+svc+"/") || u.Query().Get("ohd_port_token") == "" {
				t.Fatalf("GET /api/%s/url?cid= = %d %s, want a URL of ohd under the conversation with a token\n%s", svc, r.Status, r.Body, tail(d.logs.String(), 20))
			}
			return u
		}
		get := func(u string, cookie string) (int, string, *http.Response) {
			t.Helper()
			req, _ := http.NewRequest("GET", u, nil)
			if cookie != "" {
				req.Header.Set("Cookie", cookie)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b), resp
		}
		echo := func(u, cookie string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Cookie": {cookie}}})
			if err != nil {
				return err
			}
			defer c.CloseNow()
			if err := c.Write(ctx, websocket.MessageText, []byte("ping")); err != nil {
				return err
			}
			_, msg, err := c.Read(ctx)
			if err == nil && string(msg) != "ping" {
				t.Errorf("echo over %s = %q", u, msg)
			}
			return err
		}

		// The pages name the cookies that reached the container: VS Code's
		// token, which ohd gives it, and never one of the client's.
		for _, tt := range []struct{ svc, page, ws string }{
			{"vscode", "<html><body>standin vscode /ohd/conversations/" + id + "/vscode/ cookies=vscode-tkn</body></html>\n", "/ohd/conversations/" + id + "/vscode/socket"},
			{"desktop", "<html><body>standin desktop /vnc.html cookies=</body></html>\n", "/ohd/conversations/" + id + "/desktop/websockify"},
		} {
			u := urlOf(tt.svc)
			if tt.svc == "vscode" && (u.Query().Has("tkn") || u.Query().Get("folder") != "workspace") {
				t.Errorf("VS Code URL %s: want no tkn (the inner key) and the server's folder", u)
			}
			if tt.svc == "desktop" && u.Query().Get("path") != strings.TrimPrefix(tt.ws, "/") {
				t.Errorf("desktop URL %s: want path=%s for noVNC's WebSocket", u, tt.ws)
			}
			// The URL as a browser opens it: no header.
			status, body, resp := get(u.String(), "")
			if status != 200 || body != tt.page {
				t.Fatalf("GET %s = %d %q, want the container's %s page %q", u, status, body, tt.svc, tt.page)
			}
			var cookie string
			for _, c := range resp.Cookies() {
				if c.Value == innerKey || c.Name == "vscode-tkn" {
					t.Errorf("%s: Set-Cookie %s reached the client", tt.svc, c.Name)
				}
				if c.Name == "ohd_port_"+tt.svc {
					cookie = c.Name + "=" + c.Value
					if !c.HttpOnly || c.Path != "/ohd/conversations/"+id+"/"+tt.svc+"/" {
						t.Errorf("%s cookie %+v: want HttpOnly, Path the service's", tt.svc, c)
					}
				}
			}
			if cookie == "" {
				t.Fatalf("%s: no ohd_port_%s cookie", tt.svc, tt.svc)
			}
			// The page's later requests and WebSocket carry the cookie.
			base := "http://" + d.listen
			page := strings.TrimSuffix(u.Path, "/") + "/"
			if tt.svc == "desktop" {
				page = u.Path
			}
			if status, body, _ := get(base+page, cookie+"; oh_workspace_session_key=x"); status != 200 || body != tt.page {
				t.Errorf("%s with the cookie = %d %q, want the page", tt.svc, status, body)
			}
			if err := echo("ws://"+d.listen+tt.ws, cookie); err != nil {
				t.Errorf("%s WebSocket with the cookie: %v", tt.svc, err)
			}
			// Without it, with another's, or a wrong one: 401.
			q := u.Query()
			q.Set("ohd_port_token", "forged")
			for what, try := range map[string][2]string{
				"nothing":             {base + page, ""},
				"a forged token":      {base + u.Path + "?" + q.Encode(), ""},
				"the other's cookie":  {base + page, "ohd_port_" + map[string]string{"vscode": "desktop", "desktop": "vscode"}[tt.svc] + "=" + strings.SplitN(cookie, "=", 2)[1]},
				"a wrong session key": {base + page + "?x-session-api-key=nope", ""},
			} {
				if status, body, _ := get(try[0], try[1]); status != 401 {
					t.Errorf("%s with %s = %d %q, want 401", tt.svc, what, status, body)
				}
			}
			if err := echo("ws://"+d.listen+tt.ws, ""); err == nil {
				t.Errorf("%s WebSocket without the cookie was accepted", tt.svc)
			}
		}

		// The newer clients' scoped routes answer JSON, as the agent server's
		// (issue 28: ohd served the editor's HTML there): the same URL as the
		// ?cid= form, and VS Code's status.
		scoped := d.call("GET", "/api/conversations/"+id+"/vscode/url", nil)
		var su struct{ URL string }
		scoped.json(t, &su)
		if g := urlOf("vscode"); scoped.Status != 200 || su.URL != g.String() {
			t.Errorf("GET /api/conversations/{id}/vscode/url = %d %s, want JSON with the ?cid= form's url %s", scoped.Status, scoped.Body, g)
		}
		st := d.call("GET", "/api/conversations/"+id+"/vscode/status", nil)
		var status struct{ Running, Enabled bool }
		if st.Status != 200 || json.Unmarshal(st.Body, &status) != nil || !status.Running || !status.Enabled {
			t.Errorf("GET /api/conversations/{id}/vscode/status = %d %s, want the server's JSON", st.Status, st.Body)
		}
		if r := d.call("GET", "/api/conversations/"+id+"/vscode/status", nil, "X-Session-API-Key", "wrong"); r.Status != 401 {
			t.Errorf("scoped vscode/status with a wrong key = %d, want 401", r.Status)
		}
		if r := d.call("GET", "/api/conversations/"+store.NewID()+"/vscode/url", nil); r.Status != 404 {
			t.Errorf("scoped vscode/url of an unknown conversation = %d %s, want 404", r.Status, r.Body)
		}

		// Turned off in the conversation's server: a message naming the flag.
		off := b.daemon(t, "--inner-env", "OH_ENABLE_VSCODE=false")
		id2, _ := off.apiCreate(map[string]any{"workspace": map[string]any{"kind": "LocalWorkspace", "working_dir": repo}})
		for svc, flag := range map[string]string{"vscode": "OH_ENABLE_VSCODE=true", "desktop": "OH_ENABLE_VNC=true"} {
			r := off.call("GET", "/api/"+svc+"/url?cid="+id2, nil)
			var e struct{ Detail string }
			_ = json.Unmarshal(r.Body, &e)
			if r.Status != 503 || !strings.Contains(e.Detail, "--inner-env "+flag) {
				t.Errorf("GET /api/%s/url with it off = %d %s, want 503 naming --inner-env %s", svc, r.Status, r.Body, flag)
			}
		}
	})
}
