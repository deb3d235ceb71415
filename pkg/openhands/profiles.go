package openhands

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// This file resolves the agent server's profiles (agent_profile_id,
// title_llm_profile, switch_profile) from the upstream's stores, and
// mediates the LLM of switch_llm, so that the inner server never gets a
// profile it cannot resolve nor a key (DESIGN §7, "Browsers and
// profiles"). The upstream is read through Mediator.Fetch with the
// client's own session key.
//
// Where the real server (v1.43.1) does each thing:
//   - the LLM profiles: profiles_router.py, GET /api/profiles/{name}
//     (L167-202): with X-Expose-Secrets: encrypted the config's api_key is
//     a Fernet token under the upstream's key; 404 "Profile '<name>' not
//     found"; names match PROFILE_NAME_PATTERN (llm_profile_store.py L33);
//   - the agent profiles: agent_profiles_router.py, GET /api/agent-profiles
//     (L255-282, summaries with id and name) and GET
//     /api/agent-profiles/{name} (L284-303, {"name","profile"}); secret-free;
//   - a create's agent_profile_id: conversation_service.py L1463-1481 and
//     _resolve_agent_from_profile L292-401 (profile by id, else
//     ProfileNotFound → 404, conversation_router.py L215-216); the
//     resolver (sdk/profiles/resolver.py resolve_agent_profile and
//     _build_openhands_settings) joins the profile, its LLM profile
//     (llm_profile_ref; missing → ProfileNotFound) and the settings'
//     mcp_config filtered by mcp_server_refs (dangling → 422) into
//     agent_settings; the server forces llm.stream and stamps load_memory;
//   - title_llm_profile: loaded by name from the LLM profile store when the
//     title is made, falling back to the agent's LLM when it does not
//     load (conversation_service.py L2425-2487);
//   - switch_profile {"profile_name"} loads the profile from the store
//     (404 "Profile '<name>' not found", 400 when invalid) and switches to
//     it (conversation_router.py L459-488, local_conversation.py L1683-1703);
//     switch_llm {"llm"} decrypts the LLM's secret fields with the
//     server's cipher and switches (conversation_router.py L491-514).

// profileNameRE is PROFILE_NAME_PATTERN (llm_profile_store.py L33),
// which the agent profile store shares.
var profileNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidProfileName reports whether s is a profile name the agent server
// accepts.
func ValidProfileName(s string) bool { return profileNameRE.MatchString(s) }

// ProfileScopedName returns the broker name of the LLM profile a
// conversation gets from the upstream's LLM profile name:
// "<id>.profile.<name>".
func ProfileScopedName(id, name string) string { return ScopedName(id, "profile."+name) }

// Fetcher reads one of the upstream's routes with the client's key: GET
// path (escaped), with X-Expose-Secrets: encrypted when encrypted. It
// returns the status and body of the answer.
type Fetcher func(ctx context.Context, path string, encrypted bool) (status int, body []byte, err error)

// noUpstream is the message of a profile ohd cannot look up.
const noUpstream = "ohd resolves profiles from the operator's own agent server, and none is configured: start ohd with --upstream (and --upstream-secret-key-file to open the profile's key)"

// fetchJSON reads path from the upstream into v. A 404 is ErrNotFound-like:
// found is false and err nil.
func (m *Mediator) fetchJSON(ctx context.Context, field, path string, encrypted bool, v any) (found bool, err error) {
	if m.Fetch == nil {
		return false, &Error{Status: http.StatusNotFound, Field: field, Msg: noUpstream}
	}
	status, body, err := m.Fetch(ctx, path, encrypted)
	if err != nil {
		return false, &Error{Status: http.StatusBadGateway, Field: field, Msg: "reading " + path + " from the upstream agent server failed: " + err.Error()}
	}
	if status == http.StatusNotFound {
		return false, nil
	}
	if status < 200 || status > 299 {
		return false, &Error{Status: http.StatusBadGateway, Field: field, Msg: fmt.Sprintf("the upstream agent server answered %s with %d", path, status)}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return false, &Error{Status: http.StatusBadGateway, Field: field, Msg: "the upstream agent server's answer to " + path + " is not the JSON ohd expects"}
	}
	return true, nil
}

// ProfileLLM returns the LLM of the upstream's LLM profile name, as GET
// /api/profiles/{name} with X-Expose-Secrets: encrypted gives it (its
// api_key a token under the upstream's key, or null), with stream set as
// given. A profile whose key is held by a provider connection is refused:
// ohd does not read those. An unknown profile is an Error with Status
// 404.
func (m *Mediator) ProfileLLM(ctx context.Context, field, name string) (map[string]any, error) {
	if !ValidProfileName(name) {
		return nil, &Error{Field: field, Msg: "a profile name is 1-64 characters of A-Z a-z 0-9 . _ - starting with a letter or digit"}
	}
	var p struct {
		Config map[string]any `json:"config"`
	}
	found, err := m.fetchJSON(ctx, field, "/api/profiles/"+url.PathEscape(name), true, &p)
	if err != nil {
		return nil, err
	}
	if !found || p.Config == nil {
		return nil, &Error{Status: http.StatusNotFound, Field: field, Msg: fmt.Sprintf("Profile '%s' not found", name)}
	}
	llm := p.Config
	if _, ok := llm["model"].(string); !ok {
		return nil, &Error{Field: field, Msg: fmt.Sprintf("the upstream's profile %q has no model", name)}
	}
	if c, _ := llm["provider_connection_id"].(string); c != "" {
		if k, _ := llm["api_key"].(string); k == "" {
			return nil, &Error{Field: field, Msg: fmt.Sprintf("the upstream's profile %q takes its key from provider connection %q, which ohd does not read: save the key in the profile itself", name, c)}
		}
	}
	// The inner server has no provider connections: it must not look one up.
	delete(llm, "provider_connection_id")
	return llm, nil
}

// MediateLLM mediates one LLM object of conversation id in place under
// broker name (see Create): its api_key (plaintext or a token under the
// upstream's key) is returned as the profile to create, and the object
// gets the relay's base_url and PlaceholderKey. The refusals of a create's
// LLMs apply (AWS keys, secret extra_headers, providers ohd does not
// mediate), and the object must not hold a key anywhere else. It returns
// nil when the LLM has no key.
func (m *Mediator) MediateLLM(ctx context.Context, id, name string, obj map[string]any, field string) (*LLM, error) {
	if _, ok := obj["model"].(string); !ok {
		return nil, &Error{Field: field + ".model", Msg: "want the LLM's model (a string)"}
	}
	st := &mediation{m: m, id: id, ctx: ctx, llmByKey: map[string]string{}, fixedName: name}
	if err := st.agent(obj, field); err != nil {
		return nil, err
	}
	if len(st.llms) > 1 {
		return nil, &Error{Field: field, Msg: "holds more than one LLM key; ohd mediates the LLM's own api_key only"}
	}
	b, err := encode(obj)
	if err != nil {
		return nil, err
	}
	if err := st.check(b, field); err != nil {
		return nil, err
	}
	if len(st.llms) == 0 {
		return nil, nil
	}
	return &st.llms[0], nil
}

// SwitchLLM mediates the body of POST /api/conversations/{id}/switch_llm,
// {"llm": {...}} (conversation_router.py L491-514; Canvas sends its
// profile's config there with the key as a token, ref §2a): the LLM's key
// becomes broker profile name. It returns the body to forward and the
// profile (nil for an LLM without a key).
func (m *Mediator) SwitchLLM(ctx context.Context, id, name string, body []byte) ([]byte, *LLM, error) {
	v, err := decode(body)
	if err != nil {
		return nil, nil, &Error{Field: "body", Msg: "not valid JSON"}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, nil, &Error{Field: "body", Msg: `want a JSON object {"llm": {...}}`}
	}
	llm, ok := obj["llm"].(map[string]any)
	if !ok {
		return nil, nil, &Error{Field: "llm", Msg: "want an LLM object with a model"}
	}
	l, err := m.MediateLLM(ctx, id, name, llm, "llm")
	if err != nil {
		return nil, nil, err
	}
	out, err := encode(obj)
	if err != nil {
		return nil, nil, err
	}
	st := &mediation{m: m, id: id, ctx: ctx}
	if l != nil {
		st.llms = []LLM{*l}
	}
	if err := st.check(out, "body"); err != nil {
		return nil, nil, err
	}
	return out, l, nil
}

// ResolveAgentProfile replaces a create body's agent_profile_id by the
// agent_settings the agent server would resolve from it (see the top of
// this file), read from the upstream's stores: the profile's own fields,
// its LLM profile's LLM (the key a token, which Create then mediates),
// the upstream settings' MCP servers the profile names, and its
// load_memory preference. A body without agent_profile_id is left as it
// is. An unknown profile or LLM profile is an Error with Status 404, as
// the agent server answers it; an ACP profile is refused (its provider
// credentials would reach the container).
//
// What differs from the server's own resolution: the user and public
// skills are loaded by the inner server (load_user_skills and
// load_public_skills; AgentContext drops the profile's disabled_skills
// after loading them, sdk/context/agent_context.py L262-290) instead of
// being discovered by the server before, the browser tool is added only
// when the profile lists it (the server adds it to a profile without
// tools when its runtime can run it, conversation_service.py L375-387),
// and the conversation's launched_agent_profile is not recorded by the
// inner server: ResolveAgentProfile returns it (nil for a body without
// agent_profile_id) for the caller to keep and show (WithLaunchedProfile).
func (m *Mediator) ResolveAgentProfile(ctx context.Context, fields map[string]json.RawMessage) (json.RawMessage, error) {
	raw, ok := fields["agent_profile_id"]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	const field = "agent_profile_id"
	var pid string
	if json.Unmarshal(raw, &pid) != nil {
		return nil, &Error{Field: field, Msg: "want a UUID string"}
	}
	want, ok := canonicalUUID(pid)
	if !ok {
		return nil, &Error{Field: field, Msg: "want a UUID string"}
	}
	for _, k := range []string{"agent", "agent_settings"} {
		if v, ok := fields[k]; ok && string(v) != "null" {
			return nil, &Error{Field: field, Msg: "`agent_profile_id` is mutually exclusive with `agent` and `agent_settings`"}
		}
	}
	notFound := &Error{Status: http.StatusNotFound, Field: field, Msg: fmt.Sprintf("Agent profile with id '%s' not found", pid)}
	var list struct {
		Profiles []struct {
			ID   *string `json:"id"`
			Name string  `json:"name"`
		} `json:"profiles"`
	}
	found, err := m.fetchJSON(ctx, field, "/api/agent-profiles", false, &list)
	if err != nil {
		return nil, err
	}
	name := ""
	for _, p := range list.Profiles {
		if p.ID != nil {
			if c, ok := canonicalUUID(*p.ID); ok && c == want {
				name = p.Name
				break
			}
		}
	}
	if !found || name == "" || !ValidProfileName(name) {
		return nil, notFound
	}
	var detail struct {
		Profile map[string]any `json:"profile"`
	}
	if found, err = m.fetchJSON(ctx, field, "/api/agent-profiles/"+url.PathEscape(name), false, &detail); err != nil {
		return nil, err
	}
	if !found || detail.Profile == nil {
		return nil, notFound
	}
	p := detail.Profile
	if kind, _ := p["agent_kind"].(string); kind != "" && kind != "openhands" {
		return nil, &Error{Field: field, Msg: fmt.Sprintf("agent profile %q is an %s profile: ohd does not mediate the provider credentials of ACP agents; launch an OpenHands agent profile", name, kind)}
	}
	var settings struct {
		AgentSettings struct {
			MCPConfig    map[string]any `json:"mcp_config"`
			AgentContext struct {
				LoadMemory bool `json:"load_memory"`
			} `json:"agent_context"`
		} `json:"agent_settings"`
	}
	if _, err := m.fetchJSON(ctx, field, "/api/settings", true, &settings); err != nil {
		return nil, err
	}
	mcp := map[string]any{}
	refs, hasRefs := p["mcp_server_refs"].([]any)
	if !hasRefs {
		for k, v := range settings.AgentSettings.MCPConfig {
			mcp[k] = v
		}
	}
	var dangling []string
	for _, r := range refs {
		n, _ := r.(string)
		if v, ok := settings.AgentSettings.MCPConfig[n]; ok {
			mcp[n] = v
		} else {
			dangling = append(dangling, fmt.Sprintf("%q", n))
		}
	}
	if len(dangling) > 0 {
		return nil, &Error{Field: field, Msg: "MCP server ref(s) not present in the user's MCP config: " + strings.Join(dangling, ", ")}
	}
	ref, _ := p["llm_profile_ref"].(string)
	llm, err := m.ProfileLLM(ctx, field, ref)
	if err != nil {
		var me *Error
		if asError(err, &me) && me.Status == http.StatusNotFound && m.Fetch != nil {
			return nil, &Error{Status: http.StatusNotFound, Field: field, Msg: fmt.Sprintf("LLM profile '%s' not found", ref)}
		}
		return nil, err
	}
	llm["stream"] = true // conversation_service.py L363-374
	ctxObj := map[string]any{
		"skills":                []any{},
		"system_message_suffix": p["system_message_suffix"],
		"load_project_skills":   true,
		"load_user_skills":      true,
		"load_public_skills":    true,
		"disabled_skills":       orEmpty(p["disabled_skills"]),
	}
	if settings.AgentSettings.AgentContext.LoadMemory {
		ctxObj["load_memory"] = true // conversation_service.py L388-396
	}
	agent := map[string]any{
		"schema_version": 5, // AGENT_SETTINGS_SCHEMA_VERSION, settings/model.py L473
		"agent_kind":     "openhands",
		"llm":            llm,
		"mcp_config":     mcp,
		"agent_context":  ctxObj,
	}
	for _, k := range []string{"agent", "tools", "condenser", "verification", "enable_sub_agents", "enable_switch_llm_tool", "tool_concurrency_limit"} {
		if v, ok := p[k]; ok {
			agent[k] = v
		}
	}
	b, err := encode(agent)
	if err != nil {
		return nil, err
	}
	delete(fields, "agent_profile_id")
	fields["agent_settings"] = b
	// LaunchedAgentProfile (sdk/profiles/agent_profile.py L280-294): the
	// profile's id and its revision at launch (0 when it has none).
	rev, _ := p["revision"].(float64)
	if rev < 0 || rev != float64(int64(rev)) {
		rev = 0
	}
	launched, err := json.Marshal(struct {
		ID       string `json:"agent_profile_id"`
		Revision int64  `json:"revision"`
	}{want, int64(rev)})
	return launched, err
}

// WithLaunchedProfile returns info (a ConversationInfo) with its
// launched_agent_profile set to launched where the inner server left it
// null or out (ResolveAgentProfile).
func WithLaunchedProfile(info, launched json.RawMessage) json.RawMessage {
	if len(launched) == 0 {
		return info
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(info, &m) != nil || m == nil {
		return info
	}
	if v, ok := m["launched_agent_profile"]; ok && string(v) != "null" {
		return info
	}
	m["launched_agent_profile"] = launched
	out, err := json.Marshal(m)
	if err != nil {
		return info
	}
	return out
}

func orEmpty(v any) any {
	if v == nil {
		return []any{}
	}
	return v
}

func asError(err error, target **Error) bool {
	e, ok := err.(*Error)
	if ok {
		*target = e
	}
	return ok
}

// canonicalUUID returns s as a lower-case hyphenated UUID, accepting the
// forms Python's UUID() takes (hyphens or not, braces, urn:uuid:).
func canonicalUUID(s string) (string, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimPrefix(s, "urn:uuid:")
	s = strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}")
	s = strings.ReplaceAll(s, "-", "")
	if len(s) != 32 {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return "", false
		}
	}
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:], true
}
