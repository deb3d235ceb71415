package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

// This file holds what the stand-in needs for ohd's secret mediation
// tests, in both of its roles:
//
// As the operator's own agent server in local mode (the upstream, run on
// the host), with STANDIN_SETTINGS_FILE naming a JSON file
// {"llm": {"model","api_key","base_url"}, "secrets": {NAME: {"value","description"}},
// "mcp_config"?: {NAME: server}} and OH_SECRET_KEY its cipher key (ref §1):
//
//	GET    /api/settings                  {agent_settings, conversation_settings, llm_api_key_is_set, ...};
//	                                      X-Expose-Secrets: encrypted|true → secret fields as Fernet tokens (503
//	                                      without OH_SECRET_KEY), plaintext → as they are, absent → "**********",
//	                                      anything else → 400 (ref §2a step 3, _secrets_exposure.py L37-62, L109-123)
//	GET    /api/settings/secrets          {"secrets":[{"name","description"}]} (ref §2a step 3)
//	GET    /api/settings/secrets/{name}   the raw value, text/plain; 404 {"detail":"Secret not found"} (ref §3)
//	GET    /api/profiles                  {"profiles":[{name,model,base_url,...,api_key_set}],"active_profile":null}
//	                                      (profiles_router.py L145-165; the settings file's "profiles", profiles.go)
//	GET    /api/file/home                 {"home": $HOME} (ref §2a step 2, file_router.py L760)
//	POST   /api/auth/workspace-session    204, Set-Cookie oh_workspace_session_key=<key> (ref §8)
//	DELETE /api/auth/workspace-session    204, the cookie cleared (ref §8)
//
// As the inner server (in a container), test-only routes that do what
// the real one does with a create body's LLM and secrets:
//
//	POST /api/conversations/{id}/secrets                 merges {"secrets":{NAME: "v"|{"value"}|source}} (ref §3, models.py L412-455)
//	GET  /api/conversations/{id}/standin/create_body     the create body exactly as received
//	POST /api/conversations/{id}/standin/llm             {"stream": bool, "prompt": str}: one LLM call as litellm
//	                                                     makes it from agent(_settings).llm (ref §4): anthropic/ →
//	                                                     POST {base_url}/v1/messages with x-api-key, else POST
//	                                                     {base_url}/chat/completions with Authorization: Bearer;
//	                                                     the provider's status and body are answered as they come,
//	                                                     with X-Standin-Llm-Ttfb-Us: the time from sending the
//	                                                     request to its first byte, as the stand-in saw it
//	GET  /api/conversations/{id}/standin/secret/{name}   resolves a secret as the SDK does on use (ref §3):
//	                                                     StaticSecret → its value; LookupSecret → GET url with its
//	                                                     headers, 30 s, non-2xx fails (here: 502 with the status)
//	POST /api/conversations/{id}/standin/mcp/{server}    connects to a remote MCP server of the body's mcp_config
//	                                                     as the SDK's MCP client does (mcp.go): initialize and
//	                                                     tools/list → {"server_info","tools"}; 502 {"detail",
//	                                                     "status","body"} with the first failed answer

// mediated is what the stand-in kept of each conversation's create body
// and secrets. One stand-in serves one process.
var mediated = struct {
	sync.Mutex
	bodies  map[string][]byte
	secrets map[string]map[string]json.RawMessage
}{bodies: map[string][]byte{}, secrets: map[string]map[string]json.RawMessage{}}

// keepCreateBody records the create body of each conversation it
// creates (by its conversation_id), as the agent server keeps the agent
// and secrets of a create: a retried create of an existing conversation
// (200) changes nothing (reference §8: the rest of its body is ignored),
// and a refused one is forgotten again. The body is kept before the
// answer goes out, so a client's next request finds it.
func (s *Server) keepCreateBody(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		if err != nil {
			writeDetail(w, http.StatusBadRequest, "reading the body: "+err.Error())
			return
		}
		var req struct {
			ID      string                     `json:"conversation_id"`
			Secrets map[string]json.RawMessage `json:"secrets"`
		}
		id, existing := "", false
		if json.Unmarshal(b, &req) == nil && req.ID != "" {
			if pid, err := parseUUID(req.ID); err == nil {
				if _, existing = s.convs.get(pid); !existing {
					id = pid
				}
			}
		}
		if !existing {
			// After the retried-create check, as the real server resolves
			// a profile only for a new conversation (ref §8).
			var ok bool
			if b, ok = resolveAgentProfile(w, b); !ok {
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		if id == "" {
			h(w, r)
			return
		}
		mediated.Lock()
		oldBody, oldSecrets := mediated.bodies[id], mediated.secrets[id]
		mediated.bodies[id] = b
		mediated.secrets[id] = map[string]json.RawMessage{}
		for k, v := range oldSecrets {
			mediated.secrets[id][k] = v
		}
		for k, v := range req.Secrets {
			mediated.secrets[id][k] = v
		}
		mediated.Unlock()
		rec := &statusRecorder{ResponseWriter: w}
		h(rec, r)
		if rec.code() == http.StatusCreated {
			registerAgentLLM(id, b)
		} else {
			mediated.Lock()
			if oldBody == nil {
				delete(mediated.bodies, id)
				delete(mediated.secrets, id)
			} else {
				mediated.bodies[id], mediated.secrets[id] = oldBody, oldSecrets
			}
			mediated.Unlock()
		}
	}
}

func (s *Server) mediationRoutes(m *http.ServeMux) {
	m.HandleFunc("POST /api/conversations/{id}/secrets", s.postSecrets)
	m.HandleFunc("GET /api/conversations/{id}/standin/create_body", s.createBody)
	m.HandleFunc("POST /api/conversations/{id}/standin/llm", s.llmCall)
	m.HandleFunc("GET /api/conversations/{id}/standin/secret/{name}", s.resolveSecret)
	m.HandleFunc("POST /api/conversations/{id}/standin/mcp/{server}", s.mcpCall)
	s.profileRoutes(m)
	if path := os.Getenv("STANDIN_SETTINGS_FILE"); path != "" {
		st := &settings{path: path, secretKey: os.Getenv("OH_SECRET_KEY")}
		m.HandleFunc("GET /api/settings", st.get)
		m.HandleFunc("GET /api/settings/secrets", st.list)
		m.HandleFunc("GET /api/settings/secrets/{name}", st.secret)
		m.HandleFunc("GET /api/profiles", listProfiles)
		m.HandleFunc("GET /api/file/home", func(w http.ResponseWriter, r *http.Request) {
			home, _ := os.UserHomeDir()
			writeJSON(w, http.StatusOK, map[string]any{"home": home})
		})
		m.HandleFunc("POST /api/auth/workspace-session", workspaceSession(false))
		m.HandleFunc("DELETE /api/auth/workspace-session", workspaceSession(true))
	}
}

func (s *Server) postSecrets(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	if _, found := s.convs.get(id); !found {
		writeDetail(w, http.StatusNotFound, "Not Found")
		return
	}
	var req struct {
		Secrets map[string]json.RawMessage `json:"secrets"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		writeValidation(w, validationError{Type: "json_invalid", Loc: []any{"body"}, Msg: err.Error(), Input: nil})
		return
	}
	mediated.Lock()
	if mediated.secrets[id] == nil {
		mediated.secrets[id] = map[string]json.RawMessage{}
	}
	for k, v := range req.Secrets {
		mediated.secrets[id][k] = v
	}
	mediated.Unlock()
	// Persisted with the conversation, secret fields sealed (persist.go).
	if _, err := s.convs.setSecrets(id, req.Secrets); err != nil {
		writeDetail(w, http.StatusInternalServerError, "cannot persist the secrets: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"success": true})
}

func (s *Server) createBody(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	mediated.Lock()
	b, found := mediated.bodies[id]
	mediated.Unlock()
	if !found {
		writeDetail(w, http.StatusNotFound, "Not Found")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// llmOf finds the agent's LLM in a create body: agent.llm (SDK) or
// agent_settings.llm (Canvas).
func llmOf(body []byte) (model, baseURL, apiKey string, ok bool) {
	var b struct {
		Agent         *struct{ LLM map[string]any } `json:"agent"`
		AgentSettings *struct{ LLM map[string]any } `json:"agent_settings"`
	}
	if json.Unmarshal(body, &b) != nil {
		return "", "", "", false
	}
	var llm map[string]any
	switch {
	case b.Agent != nil && b.Agent.LLM != nil:
		llm = b.Agent.LLM
	case b.AgentSettings != nil && b.AgentSettings.LLM != nil:
		llm = b.AgentSettings.LLM
	default:
		return "", "", "", false
	}
	model, _ = llm["model"].(string)
	baseURL, _ = llm["base_url"].(string)
	apiKey, _ = llm["api_key"].(string)
	return model, baseURL, apiKey, true
}

func (s *Server) llmCall(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	var req struct {
		Stream bool   `json:"stream"`
		Prompt string `json:"prompt"`
	}
	// Prompts are large (make bench sends 1 MiB): more than other routes take.
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 32<<20)).Decode(&req); err != nil {
		writeDetail(w, http.StatusBadRequest, err.Error())
		return
	}
	mediated.Lock()
	body := mediated.bodies[id]
	mediated.Unlock()
	model, base, key, ok := llmOf(body)
	if !ok {
		// Not created through this process (a fork moved here, a
		// restart): the agent's LLM as persisted.
		if agent, _ := s.convs.persisted(id, ""); agent != nil {
			model, base, key, ok = llmOf([]byte(`{"agent":` + string(agent) + `}`))
		}
	}
	if llm, switched := agentLLM(id); switched {
		// The agent's LLM as the registry holds it (profiles.go).
		model, _ = llm["model"].(string)
		base, _ = llm["base_url"].(string)
		key, _ = llm["api_key"].(string)
		ok = true
	}
	if !ok || base == "" {
		writeDetail(w, http.StatusBadRequest, "the conversation's create body has no agent LLM with a base_url")
		return
	}
	callLLM(w, r, model, base, key, req.Stream, req.Prompt)
}

// callLLM makes one LLM call as litellm makes it (ref §4) and answers
// the provider's answer as it comes.
func callLLM(w http.ResponseWriter, r *http.Request, model, base, key string, stream bool, prompt string) {
	name := strings.TrimPrefix(strings.TrimPrefix(model, "anthropic/"), "openai/")
	var url string
	var payload []byte
	h := http.Header{"Content-Type": {"application/json"}}
	if strings.HasPrefix(model, "anthropic/") {
		url = strings.TrimSuffix(base, "/") + "/v1/messages"
		h.Set("X-Api-Key", key)
		h.Set("Anthropic-Version", "2023-06-01")
		payload, _ = json.Marshal(map[string]any{"model": name, "max_tokens": 16, "stream": stream,
			"messages": []any{map[string]any{"role": "user", "content": prompt}}})
	} else {
		url = strings.TrimSuffix(base, "/") + "/chat/completions"
		h.Set("Authorization", "Bearer "+key)
		payload, _ = json.Marshal(map[string]any{"model": name, "stream": stream,
			"messages": []any{map[string]any{"role": "user", "content": prompt}}})
	}
	out, err := http.NewRequestWithContext(r.Context(), http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		writeDetail(w, http.StatusBadRequest, err.Error())
		return
	}
	out.Header = h
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(out)
	if err != nil {
		writeDetail(w, http.StatusBadGateway, "LLM call failed: "+err.Error())
		return
	}
	defer resp.Body.Close()
	// The first bytes are read before answering, so the time to them (as
	// the stand-in saw it, from sending the whole prompt) can be a header.
	buf := make([]byte, 32<<10)
	n, rerr := resp.Body.Read(buf)
	for k, vv := range resp.Header {
		if k != "Content-Length" {
			w.Header()[k] = vv
		}
	}
	w.Header().Set("X-Standin-Llm-Ttfb-Us", strconv.FormatInt(time.Since(t0).Microseconds(), 10))
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	if n > 0 {
		_, _ = w.Write(buf[:n])
		if fl != nil {
			fl.Flush()
		}
	}
	if rerr != nil {
		endLLMStream(rerr)
		return
	}
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
			if fl != nil {
				fl.Flush()
			}
		}
		if err != nil {
			endLLMStream(err)
			return
		}
	}
}

func (s *Server) resolveSecret(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	mediated.Lock()
	raw, found := mediated.secrets[id][name]
	mediated.Unlock()
	if !found {
		// Not created through this process: the secret as persisted.
		_, raw = s.convs.persisted(id, name)
		found = raw != nil
	}
	if !found {
		writeDetail(w, http.StatusNotFound, "no secret "+name)
		return
	}
	var src struct {
		Kind    string            `json:"kind"`
		Value   *string           `json:"value"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
	}
	var plain string
	if json.Unmarshal(raw, &plain) == nil {
		src.Kind, src.Value = "StaticSecret", &plain
	} else if err := json.Unmarshal(raw, &src); err != nil {
		writeDetail(w, http.StatusBadRequest, "bad secret source")
		return
	}
	if src.Kind == "" && src.Value != nil {
		src.Kind = "StaticSecret"
	}
	switch src.Kind {
	case "StaticSecret":
		if src.Value == nil {
			writeDetail(w, http.StatusNotFound, "secret "+name+" has no value")
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, *src.Value)
	case "LookupSecret":
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, src.URL, nil)
		if err != nil {
			writeDetail(w, http.StatusBadRequest, err.Error())
			return
		}
		for k, v := range src.Headers {
			req.Header.Set(k, v)
		}
		c := &http.Client{Timeout: 30 * time.Second}
		resp, err := c.Do(req)
		if err != nil {
			writeDetail(w, http.StatusBadGateway, "lookup failed: "+err.Error())
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			writeDetail(w, http.StatusBadGateway, fmt.Sprintf("lookup answered %d", resp.StatusCode))
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(b)
	default:
		writeDetail(w, http.StatusBadRequest, "unknown secret kind "+src.Kind)
	}
}

// settings are the upstream's saved settings, read from the file on
// every request.
type settings struct {
	path, secretKey string
}

type settingsFile struct {
	LLM struct {
		Model   string `json:"model"`
		APIKey  string `json:"api_key"`
		BaseURL string `json:"base_url"`
	} `json:"llm"`
	Secrets map[string]struct {
		Value       string `json:"value"`
		Description string `json:"description"`
	} `json:"secrets"`
	// MCPConfig is agent_settings.mcp_config, {NAME: server}, its secret
	// fields in plaintext (they are exposed as the LLM key is).
	MCPConfig map[string]map[string]any `json:"mcp_config"`
}

func (st *settings) load(w http.ResponseWriter) (settingsFile, bool) {
	var f settingsFile
	b, err := os.ReadFile(st.path)
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	if err != nil {
		writeDetail(w, http.StatusInternalServerError, "settings: "+err.Error())
		return f, false
	}
	return f, true
}

func (st *settings) get(w http.ResponseWriter, r *http.Request) {
	f, ok := st.load(w)
	if !ok {
		return
	}
	// expose is how a secret field is shown (ref §1 "Serialize").
	var expose func(string) (string, error)
	switch mode := strings.ToLower(r.Header.Get("X-Expose-Secrets")); mode {
	case "":
		expose = func(string) (string, error) { return "**********", nil }
	case "plaintext":
		expose = func(v string) (string, error) { return v, nil }
	case "encrypted", "true":
		if st.secretKey == "" {
			writeDetail(w, http.StatusServiceUnavailable, "Encryption not available: OH_SECRET_KEY is not configured")
			return
		}
		f := openhands.NewFernet(st.secretKey)
		expose = func(v string) (string, error) { return f.Encrypt([]byte(v)) }
	default:
		writeDetail(w, http.StatusBadRequest, "Invalid X-Expose-Secrets header value: use encrypted or plaintext")
		return
	}
	key, err := expose(f.LLM.APIKey)
	if err != nil {
		writeDetail(w, http.StatusInternalServerError, err.Error())
		return
	}
	agent := map[string]any{
		"llm":           map[string]any{"model": f.LLM.Model, "api_key": key, "base_url": f.LLM.BaseURL, "stream": true},
		"agent_context": map[string]any{"load_public_skills": true, "load_user_skills": true, "load_project_skills": true},
		"tools":         []any{map[string]any{"name": "terminal"}, map[string]any{"name": "file_editor"}, map[string]any{"name": "task_tracker"}},
	}
	if len(f.MCPConfig) > 0 {
		cfg, err := exposeMCP(f.MCPConfig, expose)
		if err != nil {
			writeDetail(w, http.StatusInternalServerError, err.Error())
			return
		}
		agent["mcp_config"] = cfg
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"agent_settings":          agent,
		"conversation_settings":   map[string]any{"max_iterations": 500, "confirmation_mode": false},
		"llm_api_key_is_set":      f.LLM.APIKey != "",
		"active_profile":          nil,
		"active_agent_profile_id": nil,
		"misc_settings":           map[string]any{},
	})
}

func (st *settings) list(w http.ResponseWriter, r *http.Request) {
	f, ok := st.load(w)
	if !ok {
		return
	}
	out := []map[string]string{}
	for name, s := range f.Secrets {
		out = append(out, map[string]string{"name": name, "description": s.Description})
	}
	writeJSON(w, http.StatusOK, map[string]any{"secrets": out})
}

func (st *settings) secret(w http.ResponseWriter, r *http.Request) {
	f, ok := st.load(w)
	if !ok {
		return
	}
	s, found := f.Secrets[r.PathValue("name")]
	if !found {
		writeDetail(w, http.StatusNotFound, "Secret not found")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, s.Value)
}

// workspaceSession sets (or clears) the cookie that carries the session
// key to the workspace routes (ref §8, auth_router.py).
func workspaceSession(clearIt bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, maxAge := r.Header.Get("X-Session-API-Key"), 315360000
		if clearIt {
			key, maxAge = "", 0
		}
		w.Header().Add("Set-Cookie", fmt.Sprintf("%s=%s; HttpOnly; Max-Age=%d; Path=/api/conversations; SameSite=none", openhands.WorkspaceCookie, key, maxAge))
		w.WriteHeader(http.StatusNoContent)
	}
}

// endLLMStream ends the answer of an LLM call whose provider stream ended
// with err: at io.EOF, normally; otherwise, as the agent server's LLM
// client raises on a cut stream, the caller's connection is cut too (and
// the cause logged), so the test sees the cut rather than a short answer.
func endLLMStream(err error) {
	if errors.Is(err, io.EOF) {
		return
	}
	log.Printf("standin: the LLM stream was cut: %v", err)
	panic(http.ErrAbortHandler)
}
