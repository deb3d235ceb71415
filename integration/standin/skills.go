package main

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

// Skills, as the agent server handles them (reference §5 "Metadata reads":
// "Skills are trimmed unless ?include_skills=true"; the source, at
// software-agent-sdk v1.43.1):
//
//   - A create's agent.agent_context.skills are its explicit skills.
//     AgentContext's validation refuses two skills of one name (422;
//     openhands-sdk/openhands/sdk/context/agent_context.py L248-257) and
//     then drops the skills named in disabled_skills (L285-289). It would
//     also add user skills (~/.agents/skills, ~/.openhands/skills) and the
//     public ones (a checkout of OpenHands/extensions) when
//     load_user_skills / load_public_skills say so (L260-283): the
//     stand-in's image has no such directories and its container reaches
//     no network, so, as the real server would there, it adds none.
//   - The persisted state keeps every skill: base_state.json's agent is
//     untouched by what a response shows (models.py L345-356).
//   - Every route that answers a ConversationInfo (POST
//     /api/conversations, GET /api/conversations/{id}, ?ids=, /search)
//     takes the query include_skills, default false, and unless it is true
//     answers agent.agent_context.skills as [] (conversation_router.py
//     L107-L116, L149-L157, L185-L197, L209-L232;
//     trim_conversation_response_skills, models.py L358-392). The value is
//     parsed as FastAPI parses a bool query (the last one given; pydantic's
//     true/false words, else 422 bool_parsing).
//   - Include_skills changes nothing else: the agent and its system prompt
//     get the skills either way.

// skillsError is a validation failure of a create's skills.
type skillsError struct{ msg string }

func (e *skillsError) Error() string { return e.msg }

// loadSkills applies AgentContext's validation to a create's agent: two
// explicit skills of one name are refused; the disabled ones are dropped.
// An agent without agent_context (or not an object) is returned as is.
func loadSkills(agent json.RawMessage) (json.RawMessage, error) {
	var a map[string]json.RawMessage
	if len(agent) == 0 || json.Unmarshal(agent, &a) != nil || a == nil {
		return agent, nil
	}
	var ctx map[string]json.RawMessage
	if json.Unmarshal(a["agent_context"], &ctx) != nil || ctx == nil {
		return agent, nil
	}
	var skills []map[string]json.RawMessage
	if json.Unmarshal(ctx["skills"], &skills) != nil {
		return agent, nil
	}
	seen := map[string]bool{}
	for _, s := range skills {
		var name string
		_ = json.Unmarshal(s["name"], &name)
		if seen[name] {
			return nil, &skillsError{"Value error, Duplicate skill name found: " + name}
		}
		seen[name] = true
	}
	var disabled []string
	_ = json.Unmarshal(ctx["disabled_skills"], &disabled)
	if len(disabled) == 0 {
		return agent, nil
	}
	kept := skills[:0]
	for _, s := range skills {
		var name string
		_ = json.Unmarshal(s["name"], &name)
		if !contains(disabled, name) {
			kept = append(kept, s)
		}
	}
	if kept == nil {
		kept = []map[string]json.RawMessage{}
	}
	ctx["skills"], _ = json.Marshal(kept)
	a["agent_context"], _ = json.Marshal(ctx)
	return json.Marshal(a)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// includeSkills reads the include_skills query as FastAPI reads a bool
// query parameter: the last value, pydantic's words for true and false
// (case-insensitive); anything else answers 422 here.
func includeSkills(w http.ResponseWriter, r *http.Request) (include, ok bool) {
	v := r.URL.Query()["include_skills"]
	if len(v) == 0 {
		return false, true
	}
	last := v[len(v)-1]
	switch strings.ToLower(last) {
	case "1", "on", "t", "true", "y", "yes":
		return true, true
	case "0", "off", "f", "false", "n", "no":
		return false, true
	}
	writeValidation(w, validationError{Type: "bool_parsing", Loc: []any{"query", "include_skills"}, Msg: "Input should be a valid boolean, unable to interpret input", Input: last})
	return false, false
}

// shown is c as a response shows it: its skills trimmed to [] unless
// include (trim_conversation_response_skills: only a non-empty list is
// replaced).
func shown(c ConversationInfo, include bool) ConversationInfo {
	if include || len(c.Agent) == 0 {
		return c
	}
	var a map[string]json.RawMessage
	if json.Unmarshal(c.Agent, &a) != nil || a == nil {
		return c
	}
	var ctx map[string]json.RawMessage
	if json.Unmarshal(a["agent_context"], &ctx) != nil || ctx == nil {
		return c
	}
	var skills []json.RawMessage
	if json.Unmarshal(ctx["skills"], &skills) != nil || len(skills) == 0 {
		return c
	}
	ctx["skills"] = json.RawMessage("[]")
	a["agent_context"], _ = json.Marshal(ctx)
	c.Agent, _ = json.Marshal(a)
	return c
}

// publicAgent is the agent as ConversationInfo shows it: its secret
// fields redacted, as the server serializes SecretStr for a response
// (reference §1, "Serialize": redacted; §5, the response redacts
// secrets): the LLM's api_key and AWS credentials (openhands-sdk llm.py
// L257-313, any LLM of the agent) and the values of
// agent_context.secrets (agent_context.py _serialize_secrets).
func publicAgent(agent json.RawMessage) json.RawMessage {
	if len(agent) == 0 {
		return nil
	}
	var v any
	if json.Unmarshal(agent, &v) != nil {
		return nil
	}
	b, _ := json.Marshal(redactSecretFields(v, false))
	return b
}

var secretFields = map[string]bool{"api_key": true, "aws_access_key_id": true, "aws_secret_access_key": true, "aws_session_token": true}

func redactSecretFields(v any, secret bool) any {
	switch t := v.(type) {
	case string:
		if secret {
			return openhands.Redacted
		}
	case map[string]any:
		for k, x := range t {
			if k == "secrets" {
				if m, ok := x.(map[string]any); ok {
					for name, val := range m {
						if _, isStr := val.(string); isStr {
							m[name] = openhands.Redacted
						}
					}
					continue
				}
			}
			t[k] = redactSecretFields(x, secret || secretFields[k])
		}
	case []any:
		for i, x := range t {
			t[i] = redactSecretFields(x, secret)
		}
	}
	return v
}
