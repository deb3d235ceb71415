package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

// This file holds the agent server's profiles as the stand-in needs them
// for ohd's profile and LLM-switch tests, citing the real server v1.43.1:
//
// The LLM profile store is <OH_PERSISTENCE_DIR, else ~/.openhands>/profiles
// (persistence/store.py L940-963), one <name>.json per profile; as the
// upstream the settings file's "profiles" {NAME: {model, api_key,
// base_url}} are in it too, and its "agent_profiles" [{id, name,
// llm_profile_ref, ...}] are the agent profile store.
//
//	GET  /api/profiles/{name}     {"name","config","api_key_set"}; the config's api_key null, or with
//	                              X-Expose-Secrets: encrypted a Fernet token (profiles_router.py L167-202);
//	                              404 {"detail":"Profile '<name>' not found"}
//	POST /api/profiles/{name}     {"llm","include_secrets"}: incoming tokens decrypted with the cipher,
//	                              saved (L205-246); 201 {"name","message"}
//	GET  /api/agent-profiles      {"profiles":[{id,name,agent_kind,revision,llm_profile_ref,mcp_server_refs}],
//	                              "active_agent_profile_id"} (agent_profiles_router.py L255-282)
//	GET  /api/agent-profiles/{name}  {"name","profile"}; 404 (L284-303)
//
// A create with agent_profile_id is resolved from the stand-in's own
// stores as the real server does (conversation_service.py L1463-1481,
// L292-330): an unknown id answers 404 {"detail":"Agent profile with id
// '<id>' not found"} (conversation_router.py L215-216) and creates
// nothing; a known one becomes agent_settings with the LLM of its
// llm_profile_ref (404 "LLM profile '<ref>' not found" when missing).
//
//	POST /api/conversations/{id}/switch_llm      {"llm"}: tokens decrypted with the cipher, then switched
//	                                             (conversation_router.py L491-514); {"success":true}
//	POST /api/conversations/{id}/switch_profile  {"profile_name"}: loaded from ~/.openhands/profiles (not
//	                                             OH_PERSISTENCE_DIR: ref §10), 404 "Profile '<name>'
//	                                             not found" (L459-488); {"success":true}
//
// Both switch through the conversation's LLM registry as LocalConversation
// does (local_conversation.py L1634-1703): an LLM is kept by its usage_id
// (default "default", llm.py L596) and a usage_id already there reuses the
// cached LLM (first write wins); switch_profile's usage_id is
// "profile:<name>". Test-only:
//
//	POST /api/conversations/{id}/standin/title   {"message"}: the title as the real server makes it
//	                                             (conversation_service.py L2425-2487): with the LLM of
//	                                             title_llm_profile if it loads from the store, else the
//	                                             agent's, one LLM call → {"source":"profile"|"agent",
//	                                             "status": the provider's status}
//	GET  /api/conversations/{id}/standin/llms    {"current": usage_id, "llms": {usage_id: LLM}}: the
//	                                             registry, each LLM as the switch gave it (decrypted)

var profileNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`) // llm_profile_store.py L33

// llmRegistry is each conversation's LLMs by usage_id, and the agent's
// current one.
var llmRegistry = struct {
	sync.Mutex
	byID    map[string]map[string]map[string]any
	current map[string]string
}{byID: map[string]map[string]map[string]any{}, current: map[string]string{}}

// profileDir is the profile router's store: OH_PERSISTENCE_DIR/profiles,
// else ~/.openhands/profiles (persistence/store.py L815-826, L943).
func profileDir() string {
	if d := os.Getenv("OH_PERSISTENCE_DIR"); d != "" {
		return filepath.Join(d, "profiles")
	}
	return homeProfileDir()
}

// homeProfileDir is where a conversation's switch_profile loads a
// profile: always ~/.openhands/profiles, whatever OH_PERSISTENCE_DIR says
// (ref §10, measured on v1.43.1: with OH_PERSISTENCE_DIR elsewhere the
// router saves a profile that switch_profile then answers 404 for).
func homeProfileDir() string {
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".openhands", "profiles")
}

type profileFile struct {
	Profiles      map[string]map[string]any `json:"profiles"`
	AgentProfiles []map[string]any          `json:"agent_profiles"`
}

func readProfileFile() profileFile {
	var f profileFile
	if p := os.Getenv("STANDIN_SETTINGS_FILE"); p != "" {
		if b, err := os.ReadFile(p); err == nil {
			_ = json.Unmarshal(b, &f)
		}
	}
	return f
}

// loadProfile returns LLM profile name of the store in dir (profileDir or
// homeProfileDir) with its api_key in plaintext.
func loadProfile(name, dir string) (map[string]any, bool) {
	if !profileNameRE.MatchString(name) {
		return nil, false
	}
	if p, ok := readProfileFile().Profiles[name]; ok {
		return p, true
	}
	b, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		return nil, false
	}
	var llm map[string]any
	if json.Unmarshal(b, &llm) != nil {
		return nil, false
	}
	return llm, true
}

func cipher() *openhands.Fernet {
	if k := os.Getenv("OH_SECRET_KEY"); k != "" {
		return openhands.NewFernet(k)
	}
	return nil
}

// decryptLLM is decrypt_incoming_llm_secrets (_secrets_exposure.py
// L85-106): a secret field that is a token the cipher opens is replaced by
// its plaintext; others are left.
func decryptLLM(llm map[string]any) {
	f := cipher()
	if f == nil {
		return
	}
	for _, k := range []string{"api_key", "aws_access_key_id", "aws_secret_access_key", "aws_session_token"} {
		if s, ok := llm[k].(string); ok && openhands.IsToken(s) {
			if pt, err := f.Decrypt(s); err == nil {
				llm[k] = string(pt)
			}
		}
	}
}

func (s *Server) profileRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /api/profiles/{name}", getProfile)
	m.HandleFunc("POST /api/profiles/{name}", saveProfile)
	m.HandleFunc("GET /api/agent-profiles", func(w http.ResponseWriter, r *http.Request) {
		out := []map[string]any{}
		for _, p := range readProfileFile().AgentProfiles {
			out = append(out, map[string]any{"id": p["id"], "name": p["name"], "agent_kind": "openhands", "revision": orZero(p["revision"]),
				"llm_profile_ref": p["llm_profile_ref"], "mcp_server_refs": p["mcp_server_refs"]})
		}
		writeJSON(w, http.StatusOK, map[string]any{"profiles": out, "active_agent_profile_id": nil})
	})
	m.HandleFunc("GET /api/agent-profiles/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		for _, p := range readProfileFile().AgentProfiles {
			if p["name"] == name {
				writeJSON(w, http.StatusOK, map[string]any{"name": name, "profile": p})
				return
			}
		}
		writeDetail(w, http.StatusNotFound, fmt.Sprintf("Agent profile '%s' not found", name))
	})
	m.HandleFunc("POST /api/conversations/{id}/switch_llm", s.switchLLM)
	m.HandleFunc("POST /api/conversations/{id}/switch_profile", s.switchProfile)
	m.HandleFunc("POST /api/conversations/{id}/standin/title", s.title)
	m.HandleFunc("GET /api/conversations/{id}/standin/llms", func(w http.ResponseWriter, r *http.Request) {
		id, ok := pathID(w, r)
		if !ok {
			return
		}
		llmRegistry.Lock()
		defer llmRegistry.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"current": llmRegistry.current[id], "llms": llmRegistry.byID[id]})
	})
}

// listProfiles is GET /api/profiles: the summaries, sorted by name.
func listProfiles(w http.ResponseWriter, r *http.Request) {
	f := readProfileFile()
	names := make([]string, 0, len(f.Profiles))
	for n := range f.Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	out := []map[string]any{}
	for _, n := range names {
		p := f.Profiles[n]
		key, _ := p["api_key"].(string)
		out = append(out, map[string]any{"name": n, "model": p["model"], "base_url": p["base_url"],
			"provider_connection_id": nil, "provider_connection_broken": false, "api_key_set": key != ""})
	}
	writeJSON(w, http.StatusOK, map[string]any{"profiles": out, "active_profile": nil})
}

func getProfile(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	llm, ok := loadProfile(name, profileDir())
	if !ok {
		writeDetail(w, http.StatusNotFound, fmt.Sprintf("Profile '%s' not found", name))
		return
	}
	cfg := map[string]any{}
	for k, v := range llm {
		cfg[k] = v
	}
	key, _ := llm["api_key"].(string)
	switch strings.ToLower(r.Header.Get("X-Expose-Secrets")) {
	case "":
		cfg["api_key"] = nil
	case "encrypted":
		f := cipher()
		if f == nil {
			writeDetail(w, http.StatusServiceUnavailable, "Encryption not available: OH_SECRET_KEY is not configured")
			return
		}
		if key != "" {
			tok, _ := f.Encrypt([]byte(key))
			cfg["api_key"] = tok
		}
	case "plaintext":
	default:
		writeDetail(w, http.StatusBadRequest, "Invalid X-Expose-Secrets header value: use encrypted or plaintext")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": name, "config": cfg, "api_key_set": key != ""})
}

func saveProfile(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !profileNameRE.MatchString(name) {
		writeValidation(w, validationError{Type: "string_pattern_mismatch", Loc: []any{"path", "name"}, Msg: "String should match pattern", Input: name})
		return
	}
	var req struct {
		LLM            map[string]any `json:"llm"`
		IncludeSecrets *bool          `json:"include_secrets"`
	}
	if err := decodeJSON(w, r, &req); err != nil || req.LLM == nil {
		writeValidation(w, validationError{Type: "missing", Loc: []any{"body", "llm"}, Msg: "Field required", Input: nil})
		return
	}
	decryptLLM(req.LLM)
	if req.IncludeSecrets != nil && !*req.IncludeSecrets {
		delete(req.LLM, "api_key")
	}
	b, _ := json.Marshal(req.LLM)
	if err := os.MkdirAll(profileDir(), 0o700); err == nil {
		err = os.WriteFile(filepath.Join(profileDir(), name+".json"), b, 0o600)
	} else {
		writeDetail(w, http.StatusInternalServerError, "saving the profile: "+err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"name": name, "message": fmt.Sprintf("Profile '%s' saved", name)})
}

// resolveAgentProfile rewrites a create body with agent_profile_id into
// one with agent_settings, or answers 404 as the real server does. It
// reports whether the create may go on.
func resolveAgentProfile(w http.ResponseWriter, body []byte) ([]byte, bool) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return body, true
	}
	raw, ok := fields["agent_profile_id"]
	if !ok || string(raw) == "null" {
		return body, true
	}
	var id string
	_ = json.Unmarshal(raw, &id)
	var prof map[string]any
	for _, p := range readProfileFile().AgentProfiles {
		if pid, _ := p["id"].(string); pid != "" && strings.EqualFold(pid, id) {
			prof = p
		}
	}
	if prof == nil {
		writeDetail(w, http.StatusNotFound, fmt.Sprintf("Agent profile with id '%s' not found", id))
		return nil, false
	}
	ref, _ := prof["llm_profile_ref"].(string)
	llm, ok := loadProfile(ref, profileDir())
	if !ok {
		writeDetail(w, http.StatusNotFound, fmt.Sprintf("LLM profile '%s' not found", ref))
		return nil, false
	}
	llm["stream"] = true
	delete(fields, "agent_profile_id")
	fields["agent_settings"], _ = json.Marshal(map[string]any{"agent_kind": "openhands", "llm": llm})
	b, _ := json.Marshal(fields)
	return b, true
}

// registerAgentLLM puts the agent's LLM of a new conversation in its
// registry under its usage_id.
func registerAgentLLM(id string, body []byte) {
	var b struct {
		Agent         *struct{ LLM map[string]any } `json:"agent"`
		AgentSettings *struct{ LLM map[string]any } `json:"agent_settings"`
	}
	if json.Unmarshal(body, &b) != nil {
		return
	}
	var llm map[string]any
	switch {
	case b.Agent != nil && b.Agent.LLM != nil:
		llm = b.Agent.LLM
	case b.AgentSettings != nil && b.AgentSettings.LLM != nil:
		llm = b.AgentSettings.LLM
	default:
		return
	}
	switchTo(id, llm)
}

// switchTo is LocalConversation.switch_llm: the registry's LLM of the
// same usage_id if there is one, else llm, becomes the agent's.
func switchTo(id string, llm map[string]any) {
	usage, _ := llm["usage_id"].(string)
	if usage == "" {
		usage = "default"
	}
	llmRegistry.Lock()
	defer llmRegistry.Unlock()
	reg := llmRegistry.byID[id]
	if reg == nil {
		reg = map[string]map[string]any{}
		llmRegistry.byID[id] = reg
	}
	if _, ok := reg[usage]; !ok {
		reg[usage] = llm
	}
	llmRegistry.current[id] = usage
}

// agentLLM returns the conversation's current LLM, if it has one.
func agentLLM(id string) (map[string]any, bool) {
	llmRegistry.Lock()
	defer llmRegistry.Unlock()
	llm, ok := llmRegistry.byID[id][llmRegistry.current[id]]
	return llm, ok
}

func (s *Server) switchLLM(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	var req struct {
		LLM map[string]any `json:"llm"`
	}
	if err := decodeJSON(w, r, &req); err != nil || req.LLM == nil {
		writeValidation(w, validationError{Type: "missing", Loc: []any{"body", "llm"}, Msg: "Field required", Input: nil})
		return
	}
	if _, found := s.convs.get(id); !found {
		writeDetail(w, http.StatusNotFound, "Not Found")
		return
	}
	decryptLLM(req.LLM)
	switchTo(id, req.LLM)
	writeJSON(w, http.StatusOK, map[string]bool{"success": true})
}

func (s *Server) switchProfile(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	var req struct {
		ProfileName *string `json:"profile_name"`
	}
	if err := decodeJSON(w, r, &req); err != nil || req.ProfileName == nil {
		writeValidation(w, validationError{Type: "missing", Loc: []any{"body", "profile_name"}, Msg: "Field required", Input: nil})
		return
	}
	if _, found := s.convs.get(id); !found {
		writeDetail(w, http.StatusNotFound, "Not Found")
		return
	}
	llm, ok := loadProfile(*req.ProfileName, homeProfileDir())
	if !ok {
		writeDetail(w, http.StatusNotFound, fmt.Sprintf("Profile '%s' not found", *req.ProfileName))
		return
	}
	llm["usage_id"] = "profile:" + *req.ProfileName
	switchTo(id, llm)
	writeJSON(w, http.StatusOK, map[string]bool{"success": true})
}

func (s *Server) title(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	var req struct {
		Message string `json:"message"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		writeDetail(w, http.StatusBadRequest, err.Error())
		return
	}
	mediated.Lock()
	body := mediated.bodies[id]
	mediated.Unlock()
	var b struct {
		TitleLLMProfile string `json:"title_llm_profile"`
	}
	_ = json.Unmarshal(body, &b)
	source := "profile"
	llm, ok := loadProfile(b.TitleLLMProfile, profileDir())
	if !ok {
		source = "agent"
		if llm, ok = agentLLM(id); !ok {
			writeJSON(w, http.StatusOK, map[string]any{"source": "truncation", "title": req.Message})
			return
		}
	}
	model, _ := llm["model"].(string)
	base, _ := llm["base_url"].(string)
	key, _ := llm["api_key"].(string)
	rec := &bufferWriter{header: http.Header{}}
	callLLM(rec, r, model, base, key, false, "Generate a title for: "+req.Message)
	writeJSON(w, http.StatusOK, map[string]any{"source": source, "status": rec.status, "body": rec.buf.String()})
}

// bufferWriter keeps an answer in memory.
type bufferWriter struct {
	header http.Header
	status int
	buf    bytes.Buffer
}

func (b *bufferWriter) Header() http.Header { return b.header }
func (b *bufferWriter) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}
func (b *bufferWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.buf.Write(p)
}

var _ io.Writer = (*bufferWriter)(nil)

// orZero is a profile's revision as the server lists it: 0 when unset.
func orZero(v any) any {
	if v == nil {
		return 0
	}
	return v
}
