package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/version"
)

// CapabilityRuntimeRoutes is the /server_info capability that tells
// clients to call a conversation's runtime routes under
// /api/conversations/{id}/{bash,git,file,...} rather than the global
// routes with ?cid= (ref §9 "?cid="). ohd forwards both forms to the
// conversation's container, so it advertises the scoped form only when
// the conversation image serves it.
const CapabilityRuntimeRoutes = "conversation_runtime_routes_v1"

// serverInfoBody is the agent server's ServerInfo
// (server_details_router.py L34-80), as ohd answers it without an
// upstream: version the agent server API ohd implements
// (openhands.ContractVersion, a version clients accept), ohd's own
// version beside it, no tools of its own.
type serverInfoBody struct {
	Uptime                       float64  `json:"uptime"`
	IdleTime                     float64  `json:"idle_time"`
	Title                        string   `json:"title"`
	Version                      string   `json:"version"`
	OhdVersion                   string   `json:"ohd_version"`
	SDKVersion                   string   `json:"sdk_version"`
	ToolsVersion                 string   `json:"tools_version"`
	WorkspaceVersion             string   `json:"workspace_version"`
	BuildGitSHA                  string   `json:"build_git_sha"`
	BuildGitRef                  string   `json:"build_git_ref"`
	PythonVersion                string   `json:"python_version"`
	UsableTools                  []string `json:"usable_tools"`
	RuntimeIdleTimeoutSeconds    *float64 `json:"runtime_idle_timeout_seconds"`
	Capabilities                 []string `json:"capabilities"`
	MaxForegroundTerminalTimeout *float64 `json:"max_foreground_terminal_timeout_seconds"`
	Docs                         string   `json:"docs"`
	Redoc                        string   `json:"redoc"`
}

// serverInfo answers GET /server_info without a key, as the agent server
// does: the upstream's answer when there is one, else ohd's own in the
// same shape. Either way "capabilities" holds only what ohd serves: the
// credential-binding ones are dropped (ohd answers those routes 501),
// "version" is one Agent Canvas accepts and "ohd_version" ohd's, and
// CapabilityRuntimeRoutes is there only when the conversation image's own
// /server_info says it serves those routes.
func (s *Server) serverInfo(w http.ResponseWriter, r *http.Request) {
	caps := s.ohdCapabilities(r.Context())
	if s.up == nil {
		up := time.Since(s.started).Seconds()
		writeJSON(w, http.StatusOK, serverInfoBody{
			Uptime: float64(int64(up)), IdleTime: float64(int64(up)),
			Title: "OpenHands Agent Server (ohd " + version.Version + ")", Version: openhands.ContractVersion, OhdVersion: version.Version,
			SDKVersion: "unknown", ToolsVersion: "unknown", WorkspaceVersion: "unknown",
			BuildGitSHA: "unknown", BuildGitRef: "unknown", PythonVersion: "none (ohd, Go " + runtime.Version() + ")",
			UsableTools: []string{}, Capabilities: caps, Docs: "/docs", Redoc: "/redoc",
		})
		return
	}
	info, status, ok := s.upstreamServerInfo(r.Context())
	if !ok {
		writeJSON(w, http.StatusBadGateway, errorBody{Detail: s.up.name + " did not answer /server_info"})
		return
	}
	if status != http.StatusOK {
		writeRaw(w, status, mustJSON(info))
		return
	}
	info["capabilities"] = mustJSON(caps)
	// The upstream's version stays when clients accept it (it says which
	// settings and profile routes they find there); otherwise the version
	// of the API ohd serves, which the newest Canvas checks.
	var v string
	if json.Unmarshal(info["version"], &v) != nil || !openhands.AcceptedVersion(v) {
		info["version"] = mustJSON(openhands.ContractVersion)
	}
	info["ohd_version"] = mustJSON(version.Version)
	writeRaw(w, http.StatusOK, mustJSON(info))
}

func mustJSON(v any) json.RawMessage {
	b, err := marshal(v)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}

// upstreamServerInfo reads the upstream's /server_info (key-less there).
func (s *Server) upstreamServerInfo(ctx context.Context) (map[string]json.RawMessage, int, bool) {
	b, status, err := s.upstreamGet(ctx, "/server_info", "")
	if err != nil {
		return nil, 0, false
	}
	var info map[string]json.RawMessage
	if json.Unmarshal(b, &info) != nil || info == nil {
		return nil, 0, false
	}
	return info, status, true
}

// upstreamGet GETs path from the upstream, with key as X-Session-API-Key
// when not empty; the body is bounded to 1 MiB.
func (s *Server) upstreamGet(ctx context.Context, path, key string) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.t.Metadata)
	defer cancel()
	u := *s.up.url
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawPath = ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	if key != "" {
		req.Header.Set("X-Session-API-Key", key)
	}
	resp, err := (&http.Client{Transport: s.up.transport, CheckRedirect: s.client.CheckRedirect}).Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return b, resp.StatusCode, err
}

// ohdCapabilities are the capabilities ohd advertises: the runtime
// routes capability when the image of the newest conversation serves
// them, as its inner server's /server_info says (asked once per image,
// of a running conversation: a stopped one is not started for it);
// nothing else.
func (s *Server) ohdCapabilities(ctx context.Context) []string {
	caps := []string{}
	var newest store.Conversation
	for _, c := range s.visibleList() {
		if c.ImageID != "" {
			newest = c
		}
	}
	if newest.ImageID == "" {
		return caps
	}
	s.capsMu.Lock()
	ic, known := s.imageCaps[newest.ImageID]
	s.capsMu.Unlock()
	if !known {
		ic = s.learnImageCapabilities(ctx, newest)
	}
	if slices.Contains(ic, CapabilityRuntimeRoutes) {
		caps = append(caps, CapabilityRuntimeRoutes)
	}
	return caps
}

// learnImageCapabilities asks the inner server of c (or of another
// running conversation of its image) for its /server_info capabilities
// and keeps them for the image.
func (s *Server) learnImageCapabilities(ctx context.Context, c store.Conversation) []string {
	var run store.Conversation
	for _, v := range s.visibleList() {
		if v.ImageID == c.ImageID && v.State == store.StateRunning {
			run = v
		}
	}
	if run.ID == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.t.Metadata)
	defer cancel()
	t, err := s.conv.Target(ctx, run.ID)
	if err != nil || t.Addr == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(withTarget(ctx, t), http.MethodGet, "http://"+t.Addr+"/server_info", nil)
	if err != nil {
		return nil
	}
	req.Header.Set("X-Session-API-Key", string(t.InnerKey))
	resp, err := s.client.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var info struct {
		Capabilities []string `json:"capabilities"`
	}
	// An answer that is not a ServerInfo counts as "no capabilities": the
	// image is not asked again (this route needs no key).
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&info) != nil {
		info.Capabilities = nil
	}
	if info.Capabilities == nil {
		info.Capabilities = []string{}
	}
	s.capsMu.Lock()
	s.imageCaps[c.ImageID] = info.Capabilities
	s.capsMu.Unlock()
	return info.Capabilities
}

// prepareForSandboxPause answers POST
// /api/conversations/prepare-for-sandbox-pause, the agent server's
// "drain every conversation before the sandbox is paused" route
// (credential_binding.py L107-110, 204 No Content), which the mux would
// otherwise take for a conversation id. ohd's conversations each run in
// their own container with their state on the host, written as it
// happens: there is nothing of theirs to drain. With an upstream the
// request passes to it (its own conversations); without one, 204.
func (s *Server) prepareForSandboxPause(w http.ResponseWriter, r *http.Request) {
	if s.up != nil {
		s.passUpstream(w, r)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
