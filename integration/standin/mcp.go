package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// MCP servers, as the agent server meets them (ref §1; SDK
// openhands-sdk/openhands/sdk/mcp/config.py @v1.43.1).
//
// As the upstream, exposeMCP shows agent_settings.mcp_config's secret
// fields (every value of env and headers, auth.value, auth.password,
// auth.headers.*) like the LLM key: redacted, in plaintext, or as Fernet
// tokens.
//
// As the inner server, POST /api/conversations/{id}/standin/mcp/{server}
// connects to the remote server of that name in the create body's
// agent(_settings).mcp_config as the agent server's MCP client (FastMCP's
// streamable HTTP transport) does when it creates the agent's MCP tools:
// the server's headers plus what auth becomes (api_key with header_name →
// that header, else "Authorization: Bearer"; bearer likewise; basic →
// "Authorization: Basic base64(user:password)"; header → its headers;
// _normalize_server_for_fastmcp), JSON-RPC initialize, the initialized
// notification and tools/list, each a POST of the url with Accept:
// application/json, text/event-stream and the session's Mcp-Session-Id.
// It answers {"server_info", "tools": [names]}, or 502 {"detail",
// "status", "body"} with the first failed answer.

// exposeMCP returns a copy of cfg with its secret fields passed through
// expose.
func exposeMCP(cfg map[string]map[string]any, expose func(string) (string, error)) (map[string]any, error) {
	b, _ := json.Marshal(cfg)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	secretMap := func(m any) error {
		mm, _ := m.(map[string]any)
		for k, v := range mm {
			s, ok := v.(string)
			if !ok {
				continue
			}
			e, err := expose(s)
			if err != nil {
				return err
			}
			mm[k] = e
		}
		return nil
	}
	for _, srv := range out {
		sm, _ := srv.(map[string]any)
		for _, f := range []string{"env", "headers"} {
			if err := secretMap(sm[f]); err != nil {
				return nil, err
			}
		}
		auth, _ := sm["auth"].(map[string]any)
		for _, f := range []string{"value", "password"} {
			if s, ok := auth[f].(string); ok {
				e, err := expose(s)
				if err != nil {
					return nil, err
				}
				auth[f] = e
			}
		}
		if err := secretMap(auth["headers"]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// mcpServerOf finds server name in a create body's mcp_config.
func mcpServerOf(body []byte, name string) (map[string]any, bool) {
	type agent struct {
		MCPConfig map[string]any `json:"mcp_config"`
	}
	var b struct {
		Agent         *agent `json:"agent"`
		AgentSettings *agent `json:"agent_settings"`
	}
	_ = json.Unmarshal(body, &b)
	for _, a := range []*agent{b.Agent, b.AgentSettings} {
		if a == nil {
			continue
		}
		servers := a.MCPConfig
		if inner, ok := servers["mcpServers"].(map[string]any); ok {
			servers = inner
		}
		if srv, ok := servers[name].(map[string]any); ok {
			return srv, true
		}
	}
	return nil, false
}

// mcpClientHeaders are the headers the SDK's MCP client sends for srv.
func mcpClientHeaders(srv map[string]any) http.Header {
	h := http.Header{}
	set := func(m any) {
		mm, _ := m.(map[string]any)
		for k, v := range mm {
			if s, ok := v.(string); ok && s != "" {
				h.Set(k, s)
			}
		}
	}
	set(srv["headers"])
	auth, _ := srv["auth"].(map[string]any)
	value, _ := auth["value"].(string)
	switch auth["strategy"] {
	case "api_key":
		if hn, _ := auth["header_name"].(string); hn != "" && value != "" {
			h.Set(hn, value)
			break
		}
		fallthrough
	case "bearer":
		if value != "" {
			h.Set("Authorization", "Bearer "+value)
		}
	case "basic":
		user, _ := auth["username"].(string)
		if pw, ok := auth["password"].(string); ok {
			h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+pw)))
		}
	case "header":
		set(auth["headers"])
	}
	return h
}

// mcpFailure is a step of the MCP handshake that was not answered 2xx.
type mcpFailure struct {
	status int
	body   string
}

func (f *mcpFailure) Error() string { return fmt.Sprintf("MCP server answered %d", f.status) }

// mcpRPC posts one JSON-RPC message and returns the result of its answer
// (nil for a notification), and the session id the server gave.
func mcpRPC(c *http.Client, url string, h http.Header, session string, msg map[string]any) (json.RawMessage, string, error) {
	b, _ := json.Marshal(msg)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, "", err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, "", &mcpFailure{status: resp.StatusCode, body: string(data)}
	}
	if _, isCall := msg["id"]; !isCall {
		return nil, resp.Header.Get("Mcp-Session-Id"), nil
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
				data = []byte(strings.TrimSpace(d))
				break
			}
		}
	}
	var answer struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(data, &answer); err != nil || answer.Error != nil {
		return nil, "", fmt.Errorf("MCP server answered no result: %s", data)
	}
	return answer.Result, resp.Header.Get("Mcp-Session-Id"), nil
}

func (s *Server) mcpCall(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	mediated.Lock()
	body := mediated.bodies[id]
	mediated.Unlock()
	srv, found := mcpServerOf(body, r.PathValue("server"))
	url, _ := srv["url"].(string)
	if !found || url == "" {
		writeDetail(w, http.StatusNotFound, "the conversation's create body has no remote MCP server "+r.PathValue("server"))
		return
	}
	h := mcpClientHeaders(srv)
	c := &http.Client{Timeout: 30 * time.Second}
	fail := func(err error) {
		out := map[string]any{"detail": "MCP connection failed: " + err.Error()}
		if f, ok := err.(*mcpFailure); ok {
			out["status"], out["body"] = f.status, f.body
		}
		writeJSON(w, http.StatusBadGateway, out)
	}
	info, session, err := mcpRPC(c, url, h, "", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize",
		"params": map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "ohd-standin", "version": version}}})
	if err != nil {
		fail(err)
		return
	}
	if _, _, err := mcpRPC(c, url, h, session, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}); err != nil {
		fail(err)
		return
	}
	list, _, err := mcpRPC(c, url, h, session, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
	if err != nil {
		fail(err)
		return
	}
	var tools struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	_ = json.Unmarshal(list, &tools)
	names := []string{}
	for _, t := range tools.Tools {
		names = append(names, t.Name)
	}
	writeJSON(w, http.StatusOK, map[string]any{"server_info": info, "tools": names})
}
