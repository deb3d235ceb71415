package openhands

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// MCP servers in a create body (ref §1 "Fields that hold Fernet tokens":
// agent.mcp_config.<server>; SDK openhands-sdk/openhands/sdk/mcp/config.py
// @v1.43.1). mcp_config is {NAME: server} or FastMCP's {"mcpServers":
// {NAME: server}}; a server is remote (url, transport "http",
// "streamable-http" or "sse"; "type" is an alias, "shttp" means "http")
// or stdio (command, args, env). Every value of headers and env is a
// secret (SecretStr), as are auth.value (strategies api_key and bearer),
// auth.password (basic), auth.headers.* (header) and OAuth's tokens. The
// SDK turns auth into headers as _normalize_server_for_fastmcp does:
// api_key with header_name → that header, without → a bearer token
// (FastMCP's string auth), bearer → "Authorization: Bearer", basic →
// "Authorization: Basic base64(user:password)", header → its headers;
// oauth2 runs FastMCP's OAuth flow in the server's process. An explicit
// Authorization header beside auth is refused by the server's validator.
//
// The agent server gives a header no lazy form: LookupSecret resolves
// only the conversation's secrets, and while the SDK expands ${NAME} in
// mcp_config from them (local_conversation.py, expand_mcp_variables), it
// writes the expanded configuration back into the agent, so the value
// would end up in the server's memory and its persisted base_state.json.
// ohd therefore mediates a remote server's credentials by relaying the
// server: they become an MCP server of the broker (URL and headers on the
// host), and the inner server gets url <Relay>/mcp/<name> with no headers
// and no auth. Every request through that URL goes to the broker, which
// injects the headers, audits the use and refuses it once revoked.

// MCP is a remote MCP server taken out of a body: the broker's MCP server
// to create, granted to that conversation only.
type MCP struct {
	// Name is the server's broker name: "<conversation-id>.mcp.<server>"
	// (or ".mcp-<n>" for a server name that cannot be one).
	Name string
	// URL is the server's own endpoint, as the body gave it.
	URL     string
	Headers []MCPHeader
}

// MCPHeader is a credential header of an MCP server: Secret is the broker
// secret ("<Name>.h<n>") that holds Value.
type MCPHeader struct {
	Name, Secret string
	Value        []byte
}

// mcpVar is a braced reference the SDK expands in mcp_config from the
// conversation's secrets: ${NAME} or ${NAME:-default} (skills/utils.py,
// _BRACED_VAR_PATTERN).
var mcpVar = regexp.MustCompile(`\$\{([a-zA-Z_][a-zA-Z0-9_]*)(?::-([^}]*))?\}`)

// pendingMCP is a server whose headers are resolved once the body's
// secrets are known.
type pendingMCP struct {
	srv     map[string]any
	path    string
	name    string // the key in mcp_config
	url     string
	headers []mcpRawHeader
}

type mcpRawHeader struct {
	name, path string
	value      []byte
}

// mcpConfig mediates an mcp_config value: stdio servers' environments are
// checked now, remote servers with credentials kept for resolveMCP.
func (st *mediation) mcpConfig(v any, path string) error {
	servers, ok := v.(map[string]any)
	if !ok {
		return nil // not ohd's to validate: the agent server refuses it
	}
	if inner, ok := servers["mcpServers"].(map[string]any); ok {
		servers, path = inner, path+".mcpServers"
	}
	for _, name := range sortedKeys(servers) {
		srv, ok := servers[name].(map[string]any)
		if !ok {
			continue
		}
		if err := st.mcpServer(name, srv, path+"."+name); err != nil {
			return err
		}
	}
	return nil
}

func (st *mediation) mcpServer(name string, srv map[string]any, path string) error {
	if env, ok := srv["env"].(map[string]any); ok {
		for _, k := range sortedKeys(env) {
			p := path + ".env." + k
			val, has, err := st.secretValue(env[k], p)
			if err != nil || !has {
				if err == nil {
					delete(env, k) // null, empty or redacted: the server drops it too
				}
				if err != nil {
					return err
				}
				continue
			}
			if IsSecretKey(k) {
				return &Error{Field: p, Msg: "a stdio MCP server runs inside the conversation's container, so its environment is there too: ohd cannot keep this value out of it; run the server as a remote (streamable HTTP) MCP server, whose credential headers ohd keeps on the host, or remove the variable"}
			}
			// Not a credential by its name: the agent server would hand
			// it to the process as it is, so it goes in plaintext.
			env[k] = string(val)
		}
	}
	raw, err := st.mcpHeaders(srv, path)
	if err != nil || len(raw) == 0 {
		return err
	}
	u, _ := srv["url"].(string)
	if u == "" {
		return &Error{Field: path, Msg: "has credential headers but no url: ohd mediates the credentials of remote MCP servers only"}
	}
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "https" && pu.Scheme != "http") || pu.Host == "" {
		return &Error{Field: path + ".url", Msg: "want an http(s) URL"}
	}
	if pu.User != nil {
		return &Error{Field: path + ".url", Msg: "holds credentials: give them as auth (strategy basic) instead, which ohd keeps on the host"}
	}
	transport, _ := srv["transport"].(string)
	if transport == "" {
		transport, _ = srv["type"].(string)
	}
	switch transport {
	case "http", "shttp", "streamable-http":
	case "":
		// FastMCP infers SSE from a URL ending in /sse.
		if strings.HasSuffix(strings.TrimSuffix(pu.Path, "/"), "/sse") {
			transport = "sse"
			break
		}
		srv["transport"] = "http"
	}
	switch transport {
	case "sse":
		return &Error{Field: path + ".transport", Msg: "ohd relays the credentials of streamable HTTP MCP servers only: an SSE server tells its client where to post by a path on its own host, which the relay cannot follow; use the server's streamable HTTP endpoint (transport \"http\")"}
	case "http", "shttp", "streamable-http", "":
	default:
		return &Error{Field: path + ".transport", Msg: "has credential headers but is not a remote transport: ohd mediates the credentials of remote MCP servers only"}
	}
	st.mcps = append(st.mcps, pendingMCP{srv: srv, path: path, name: name, url: u, headers: raw})
	return nil
}

// mcpHeaders returns the credential headers a server sends (its headers
// and what its auth becomes, ref above), removing them from srv.
func (st *mediation) mcpHeaders(srv map[string]any, path string) ([]mcpRawHeader, error) {
	var out []mcpRawHeader
	add := func(name, p string, v []byte) {
		st.taken = append(st.taken, v)
		for i, h := range out {
			if strings.EqualFold(h.name, name) {
				out[i] = mcpRawHeader{name: name, path: p, value: v}
				return
			}
		}
		out = append(out, mcpRawHeader{name: name, path: p, value: v})
	}
	headers := func(m map[string]any, p string) error {
		for _, k := range sortedKeys(m) {
			v, has, err := st.secretValue(m[k], p+"."+k)
			if err != nil {
				return err
			}
			if has {
				add(k, p+"."+k, v)
			}
		}
		return nil
	}
	if h, ok := srv["headers"].(map[string]any); ok {
		if err := headers(h, path+".headers"); err != nil {
			return nil, err
		}
	} else if srv["headers"] != nil {
		return nil, &Error{Field: path + ".headers", Msg: "want an object"}
	}
	explicitAuthorization := false
	for _, h := range out {
		explicitAuthorization = explicitAuthorization || strings.EqualFold(h.name, "Authorization")
	}
	if a, ok := srv["auth"].(map[string]any); ok {
		p := path + ".auth"
		if explicitAuthorization {
			// config.py _validate_server.
			return nil, &Error{Field: p, Msg: "'auth' cannot be combined with an explicit top-level 'Authorization' header; use auth.strategy='header' instead"}
		}
		strategy, _ := a["strategy"].(string)
		value := func(f string) ([]byte, bool, error) { return st.secretValue(a[f], p+"."+f) }
		switch strategy {
		case "none":
		case "api_key", "bearer":
			v, has, err := value("value")
			if err != nil {
				return nil, err
			}
			hn, _ := a["header_name"].(string)
			switch {
			case !has:
			case strategy == "api_key" && hn != "":
				add(hn, p+".value", v)
			default:
				add("Authorization", p+".value", append([]byte("Bearer "), v...))
			}
		case "basic":
			pw, has, err := value("password")
			if err != nil {
				return nil, err
			}
			user, _ := a["username"].(string)
			if has {
				st.taken = append(st.taken, pw)
				add("Authorization", p+".password", []byte("Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+string(pw)))))
			}
		case "header":
			if h, ok := a["headers"].(map[string]any); ok {
				if err := headers(h, p+".headers"); err != nil {
					return nil, err
				}
			}
		case "oauth2":
			return nil, &Error{Field: p, Msg: "an OAuth MCP server runs its OAuth flow and keeps its tokens inside the conversation's container, so ohd cannot keep them out; give the server a static token (auth strategy bearer or header), which ohd keeps on the host"}
		default:
			return nil, &Error{Field: p + ".strategy", Msg: `unknown auth strategy: want "none", "api_key", "bearer", "basic", "header" or "oauth2"`}
		}
		if strategy != "none" {
			delete(srv, "auth")
		}
	} else if srv["auth"] != nil {
		return nil, &Error{Field: path + ".auth", Msg: "want an object"}
	}
	delete(srv, "headers")
	return out, nil
}

// resolveMCP turns the pending servers into broker MCP servers once the
// body's own secrets are known: ${NAME} in a header is expanded from them
// as the SDK would (ref above), and the server is pointed at the relay.
func (st *mediation) resolveMCP() error {
	used := map[string]bool{}
	for _, s := range st.secrets {
		used[s.Name] = true
	}
	for i, p := range st.mcps {
		name := ScopedName(st.id, "mcp."+p.name)
		if !validSecretName("mcp."+p.name) || len(name)+4 > 128 {
			name = ScopedName(st.id, fmt.Sprintf("mcp-%d", i+1))
		}
		m := MCP{Name: name, URL: p.url}
		for j, h := range p.headers {
			v, err := st.expandMCP(h)
			if err != nil {
				return err
			}
			for _, f := range st.m.Forbidden {
				if len(f) > 0 && strings.Contains(string(v), string(f)) {
					return &Error{Field: h.path, Msg: "holds one of ohd's keys (a session API key or the upstream's secret key); ohd never passes them on: remove it"}
				}
			}
			sn := fmt.Sprintf("%s.h%d", name, j+1)
			if used[sn] {
				return &Error{Field: h.path, Msg: "ohd's name for this credential, " + sn + ", is taken by a secret of the same body: rename that secret"}
			}
			used[sn] = true
			m.Headers = append(m.Headers, MCPHeader{Name: h.name, Secret: sn, Value: v})
		}
		st.mcpOut = append(st.mcpOut, m)
		p.srv["url"] = st.m.Relay + "/mcp/" + name
	}
	return nil
}

// expandMCP expands ${NAME} and ${NAME:-default} in a header value from
// the body's secrets. A reference to nothing with no default is refused:
// the SDK would leave it (or take it from the inner server's environment,
// which holds none), and ohd would inject it literally.
func (st *mediation) expandMCP(h mcpRawHeader) ([]byte, error) {
	if !mcpVar.Match(h.value) {
		return h.value, nil
	}
	var missing string
	out := mcpVar.ReplaceAllFunc(h.value, func(ref []byte) []byte {
		g := mcpVar.FindSubmatch(ref)
		if v, ok := st.secretByName[string(g[1])]; ok {
			return v
		}
		if g[2] != nil || strings.Contains(string(ref), ":-") {
			return g[2]
		}
		missing = string(g[1])
		return ref
	})
	if missing != "" {
		return nil, &Error{Field: h.path, Msg: "refers to ${" + missing + "}, which is not a secret of this create body and has no default: send the secret in the body's secrets (ohd expands the reference when it takes the header out of the container)"}
	}
	return out, nil
}
