package openhands

import (
	"encoding/json"
	"fmt"
	"strings"
)

// IncludeSkillsParam is the query parameter of the agent server's routes
// that answer a ConversationInfo (create, get, ?ids=, /search, fork):
// unless it is true the answer's agent.agent_context.skills is [] (ref §5
// "Metadata reads"; conversation_router.py L107-L232, default false).
const IncludeSkillsParam = "include_skills"

// IncludeSkills reads include_skills as the server's FastAPI does a bool
// query parameter: the last value given, pydantic's words for true and
// false (case-insensitive), false when absent. Anything else is an error
// (the server answers 422 bool_parsing).
func IncludeSkills(values []string) (bool, error) {
	if len(values) == 0 {
		return false, nil
	}
	switch strings.ToLower(values[len(values)-1]) {
	case "1", "on", "t", "true", "y", "yes":
		return true, nil
	case "0", "off", "f", "false", "n", "no":
		return false, nil
	}
	return false, fmt.Errorf("%s=%q: Input should be a valid boolean, unable to interpret input", IncludeSkillsParam, values[len(values)-1])
}

// TrimSkills returns info (a ConversationInfo) with a non-empty
// agent.agent_context.skills replaced by [], as the server answers unless
// include_skills is true (trim_conversation_response_skills, models.py
// L358-392: the persisted state keeps the skills). Anything else is
// returned unchanged.
func TrimSkills(info json.RawMessage) json.RawMessage {
	var top map[string]json.RawMessage
	if json.Unmarshal(info, &top) != nil || top == nil {
		return info
	}
	var agent map[string]json.RawMessage
	if json.Unmarshal(top["agent"], &agent) != nil || agent == nil {
		return info
	}
	var ctx map[string]json.RawMessage
	if json.Unmarshal(agent["agent_context"], &ctx) != nil || ctx == nil {
		return info
	}
	var skills []json.RawMessage
	if json.Unmarshal(ctx["skills"], &skills) != nil || len(skills) == 0 {
		return info
	}
	ctx["skills"] = json.RawMessage("[]")
	var err error
	if agent["agent_context"], err = json.Marshal(ctx); err != nil {
		return info
	}
	if top["agent"], err = json.Marshal(agent); err != nil {
		return info
	}
	out, err := json.Marshal(top)
	if err != nil {
		return info
	}
	return out
}
