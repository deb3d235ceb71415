package openhands

import "strings"

// globalRouters are the agent server's global routers that the docker
// runtime of PR #3403 sends to a conversation's container when a request
// names it with ?cid= (deprecated v1.48 → v1.53, reference 002:
// docker_global_proxy_router, "bash/git/file/vscode/desktop/hooks/mcp/
// skills/tools/llm").
var globalRouters = []string{
	"/api/bash", "/api/git", "/api/file", "/api/vscode", "/api/desktop",
	"/api/hooks", "/api/mcp", "/api/skills", "/api/tools", "/api/llm",
}

// CIDParam is the query parameter that names the conversation of a
// deprecated global route.
const CIDParam = "cid"

// IsGlobalRouter reports whether path (unescaped) is under one of the
// agent server's global routers that ?cid= sends to a conversation.
func IsGlobalRouter(path string) bool {
	for _, p := range globalRouters {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// globalSockets are the agent server's WebSockets that are not a
// conversation's: its one bash socket, /sockets/bash-events (sockets.py
// L386-479, ref §7), which carries the events of the bash router
// (/api/bash). The docker runtime's ?cid= routing names only HTTP routers
// (reference 002); ohd sends this socket with ?cid= to the same
// conversation as /api/bash?cid=, since the commands it runs and reports
// are that conversation's, in its container.
var globalSockets = []string{"/sockets/bash-events"}

// IsGlobalSocket reports whether path (unescaped) is one of the agent
// server's global WebSockets that ?cid= sends to a conversation.
func IsGlobalSocket(path string) bool {
	for _, p := range globalSockets {
		if path == p {
			return true
		}
	}
	return false
}

// ExposeSecretsHeader is the header that asks the agent server for its
// settings with secrets (ref §2a step 3: "encrypted", "plaintext" or the
// legacy "true"). Only the upstream's own routes may receive it.
const ExposeSecretsHeader = "X-Expose-Secrets"

// WorkspaceCookie is the cookie POST /api/auth/workspace-session sets,
// holding the session key; the agent server honours it on GET
// /api/conversations/{id}/workspace[/{path}] only (ref §8, workspace
// cookie).
const WorkspaceCookie = "oh_workspace_session_key"

// IsWorkspaceTail reports whether the part of a path after
// /api/conversations/{id}/ is one of the routes the workspace cookie
// authenticates.
func IsWorkspaceTail(tail string) bool {
	return tail == "workspace" || strings.HasPrefix(tail, "workspace/")
}

// IsolatedWorkingDir is the working_dir Agent Canvas sends in its isolated
// mode (ref §10: chosen when /server_info says the conversation runtime
// is docker, or workspace_mode isolated): the path the agent server's
// docker runtime mounts each conversation's own folder at (ref §5,
// "Mounts").
const IsolatedWorkingDir = "/workspace"
