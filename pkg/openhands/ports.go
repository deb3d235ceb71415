package openhands

// The other servers of the agent server's image (ref §9 "VS Code and the
// desktop"), which ohd reaches inside a conversation's container and
// serves under the conversation's API path (pkg/proxy ports.go).
const (
	// VSCodePort is where the image's openvscode-server listens
	// (config.py L306-313 @v1.43.1, vscode_port default 8001).
	VSCodePort = 8001
	// DesktopPort is where its noVNC listens (desktop_service.py L23,
	// NOVNC_PORT default 8002; only with OH_ENABLE_VNC=true).
	DesktopPort = 8002
	// VSCodeBasePathEnv is config.py's vscode_base_path (L314-320): passed
	// to openvscode-server as --server-base-path, so it answers only under
	// that prefix and names it in every URL it makes, and
	// /api/vscode/url includes it (vscode_service.py L107-112).
	VSCodeBasePathEnv = "OH_VSCODE_BASE_PATH"
	// VSCodeTokenCookie is the cookie openvscode-server takes its
	// connection token from after the first ?tkn= (the agent server sets
	// that token to its first session key: vscode_service.py
	// get_vscode_service, so /api/vscode/url hands out the inner key).
	VSCodeTokenCookie = "vscode-tkn"
)

// PortServices are the services ohd serves by name, with their port.
var PortServices = map[string]int{"vscode": VSCodePort, "desktop": DesktopPort}

// PortPath is where ohd serves conversation id's service svc ("vscode" or
// "desktop"): /ohd/conversations/<id>/<svc>, a path the agent server does
// not use (its newer releases answer JSON under
// /api/conversations/<id>/vscode/url and .../status: ref §10, "Scoped VS
// Code routes"). VS Code runs with it as its base path (Env), so the path
// reaches it unchanged; the desktop's noVNC serves from its root, so ohd
// strips it.
func PortPath(id, svc string) string { return "/ohd/conversations/" + id + "/" + svc }

// LegacyPortPath is where ohd served svc before PortPath: VS Code in a
// container started then runs with it as its base path, so ohd still
// proxies it there (all but the scoped JSON routes, ScopedPortRoutes).
func LegacyPortPath(id, svc string) string { return "/api/conversations/" + id + "/" + svc }

// ScopedPortRoutes are the JSON routes of the agent server under
// /api/conversations/<id>/<svc>/ (ref §10): each answers as the global
// /api/<svc>/<route> of that conversation's server does.
var ScopedPortRoutes = map[string][]string{"vscode": {"url", "status"}, "desktop": {"url"}}
