package main

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// VS Code and the desktop (reference §9; vscode_router.py, vscode_service.py,
// desktop_router.py, desktop_service.py @v1.43.1).
//
//	GET /api/vscode/url?base_url=&workspace_dir=   {"url": "<base_url or http://localhost:8001><base path>/?tkn=<first session key>&folder=<workspace_dir, default workspace>"};
//	                                              url null without a session key (no connection token);
//	                                              503 {"detail":"VSCode is disabled in configuration. ..."} with OH_ENABLE_VSCODE=false
//	GET /api/vscode/status                         {"running": true, "enabled": true}; {"running": false, "enabled": false,
//	                                              "message": "VSCode is disabled in configuration"} when off
//	GET /api/desktop/url?base_url=                 {"url": "<base_url, default http://localhost:8002>/vnc.html?autoconnect=1&resize=remote"};
//	                                              503 {"detail":"Desktop is disabled in configuration. ..."} unless OH_ENABLE_VNC=true
//
// The real image runs openvscode-server on 8001 (--connection-token the
// first session key, --server-base-path OH_VSCODE_BASE_PATH) and noVNC on
// 8002; the stand-in serves a small stand-in of each there (only when it
// listens on --host/--port, not with STANDIN_ADDR): VS Code answers only
// under its base path (404 elsewhere) and only with the token, as ?tkn=
// (then it sets the cookie vscode-tkn) or that cookie (403 otherwise);
// noVNC serves /vnc.html and /websockify without authentication. Each
// echoes a WebSocket's messages, and its pages name the server, the path
// and the cookies that reached it.

func (s *Server) portRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /api/vscode/url", s.vscodeURL)
	m.HandleFunc("GET /api/desktop/url", s.desktopURL)
	m.HandleFunc("GET /api/vscode/status", func(w http.ResponseWriter, r *http.Request) {
		if !s.cfg.VSCode {
			writeJSON(w, http.StatusOK, map[string]any{"running": false, "enabled": false, "message": "VSCode is disabled in configuration"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"running": true, "enabled": true})
	})
}

func (s *Server) vscodeURL(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.VSCode {
		writeDetail(w, http.StatusServiceUnavailable, "VSCode is disabled in configuration. Set enable_vscode=true to enable.")
		return
	}
	if len(s.cfg.Keys) == 0 {
		writeJSON(w, http.StatusOK, map[string]any{"url": nil})
		return
	}
	q := r.URL.Query()
	base := q.Get("base_url")
	if base == "" {
		base = "http://localhost:8001"
	}
	base = strings.TrimRight(base, "/")
	if p := strings.Trim(s.cfg.VSCodeBasePath, "/"); p != "" {
		base += "/" + p
	}
	folder := q.Get("workspace_dir")
	if !q.Has("workspace_dir") {
		folder = "workspace"
	}
	writeJSON(w, http.StatusOK, map[string]any{"url": base + "/?tkn=" + s.cfg.Keys[0] + "&folder=" + folder})
}

func (s *Server) desktopURL(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.Desktop {
		writeDetail(w, http.StatusServiceUnavailable, "Desktop is disabled in configuration. Set enable_vnc=true to enable.")
		return
	}
	base := r.URL.Query().Get("base_url")
	if base == "" {
		base = "http://localhost:8002"
	}
	writeJSON(w, http.StatusOK, map[string]any{"url": base + "/vnc.html?autoconnect=1&resize=remote"})
}

// vscodeHandler is the stand-in of openvscode-server.
func (s *Server) vscodeHandler() http.Handler {
	base := "/" + strings.Trim(s.cfg.VSCodeBasePath, "/")
	if base == "/" {
		base = ""
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if base != "" && r.URL.Path != base && !strings.HasPrefix(r.URL.Path, base+"/") {
			http.NotFound(w, r)
			return
		}
		token := ""
		if len(s.cfg.Keys) > 0 {
			token = s.cfg.Keys[0]
		}
		got := r.URL.Query().Get("tkn")
		if got != "" {
			http.SetCookie(w, &http.Cookie{Name: "vscode-tkn", Value: got, Path: "/", HttpOnly: true})
		} else if c, err := r.Cookie("vscode-tkn"); err == nil {
			got = c.Value
		}
		if token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			http.Error(w, "Forbidden.", http.StatusForbidden)
			return
		}
		portPage(w, r, "vscode")
	})
}

// desktopHandler is the stand-in of noVNC's web server and proxy.
func desktopHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/vnc.html" && r.URL.Path != "/websockify" {
			http.NotFound(w, r)
			return
		}
		portPage(w, r, "desktop")
	})
}

// portPage answers a page naming the server and path, or echoes a
// WebSocket.
func portPage(w http.ResponseWriter, r *http.Request, server string) {
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if c.Write(r.Context(), typ, msg) != nil {
				return
			}
		}
	}
	var names []string
	for _, c := range r.Cookies() {
		names = append(names, c.Name)
	}
	sort.Strings(names)
	w.Header().Set("Content-Type", "text/html")
	fmt.Fprintf(w, "<html><body>standin %s %s cookies=%s</body></html>\n", server, r.URL.Path, strings.Join(names, ","))
}

// servePorts serves VS Code on host:8001 and the desktop on host:8002
// until ctx ends; a port it cannot listen on is skipped with a warning,
// as the real services start or warn.
func (s *Server) servePorts(ctx context.Context, host string) {
	serve := func(port string, h http.Handler) {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
		if err != nil {
			s.log.Warn("standin: port not available", "port", port, "err", err)
			return
		}
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		go func() {
			<-ctx.Done()
			_ = hs.Close()
		}()
	}
	if s.cfg.VSCode {
		serve("8001", s.vscodeHandler())
	}
	if s.cfg.Desktop {
		serve("8002", desktopHandler())
	}
}
