package openhands

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadInfoHasTheLiveAnswersFields: base_state.json is written with
// exclude_none (state.py L437), so the answer from the files must add
// every top-level ConversationInfo field the live server always sends
// (models.py L123-337), keeping the values that are there.
func TestReadInfoHasTheLiveAnswersFields(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "conv")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MetaFile), []byte(`{"id":"a","title":"kept","workspace":{"kind":"LocalWorkspace","working_dir":"/w"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, BaseStateFile), []byte(`{"id":"a","execution_status":"idle","invoked_skills":["s"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	raw, err := ReadInfo(root, "conv")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	for k := range infoDefaults {
		if _, ok := got[k]; !ok {
			t.Errorf("ReadInfo lacks %q: %s", k, raw)
		}
	}
	if string(got["title"]) != `"kept"` || string(got["invoked_skills"]) != `["s"]` || string(got["sub_conversation_ids"]) != `[]` || string(got["supports_runtime_model_switch"]) != `false` {
		t.Errorf("ReadInfo = %s: a stored value was replaced or a default is wrong", raw)
	}
}

func TestColdStatus(t *testing.T) {
	for in, want := range map[string]string{"running": "error", "idle": "idle", "paused": "paused", "finished": "finished", "error": "error", "stuck": "stuck"} {
		if got := ColdStatus(in); got != want {
			t.Errorf("ColdStatus(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Status(WithStatus(json.RawMessage(`{"execution_status":"running","x":1}`), "error")); got != "error" {
		t.Errorf("WithStatus: status %q, want error", got)
	}
}

// TestReadInfoIsTheModelsAnswer: from files in the real server's shapes
// (meta.json a StoredConversation dump; base_state.json a ConversationState
// dump with exclude_none, including the state fields ConversationInfo does
// not have), ReadInfo answers exactly the fields of the agent server's
// ConversationInfo (InfoFields, models.py L123-345), as
// _compose_conversation_info builds it: meta's metadata, the state's
// fields, the ACP model fields from agent_state, no state-only field, no
// StoredConversation-only field (secrets, plugins, ...), and no secret.
func TestReadInfoIsTheModelsAnswer(t *testing.T) {
	modelFields := []string{ // models.py L123-345 (software-agent-sdk 611629e), in order
		"id", "workspace", "persistence_dir", "max_iterations", "stuck_detection", "execution_status",
		"confirmation_policy", "security_analyzer", "activated_knowledge_skills", "invoked_skills",
		"blocked_actions", "blocked_messages", "last_user_message_id", "leaf_event_id", "stats",
		"secret_registry", "agent_state", "hook_config", "title", "metrics", "created_at", "updated_at",
		"forked_from_conversation_id", "forked_from_event_id", "parent_conversation_id", "sub_conversation_ids",
		"tags", "current_model_id", "available_models", "supports_runtime_model_switch",
		"launched_agent_profile", "agent", "client_tools",
	}
	if len(modelFields) != 33 || len(InfoFields) != len(modelFields) {
		t.Fatalf("InfoFields has %d fields, the model %d (33)", len(InfoFields), len(modelFields))
	}
	root := t.TempDir()
	dir := filepath.Join(root, "conv")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	token := TokenPrefix + "AAAAAAAAAAAAAAAA"
	meta := `{"id":"5f0c","title":"t","metrics":null,"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:01Z",
		"forked_from_conversation_id":null,"forked_from_event_id":null,"launched_agent_profile":null,
		"required_runtime_credential_bindings":[],"workspace":{"kind":"LocalWorkspace","working_dir":"/w"},
		"conversation_id":"5f0c","parent_conversation_id":null,"secrets":{"X":"` + token + `"},"tags":{},"autotitle":true,
		"client_tools":[],"plugins":null,"agent_definitions":[],"tool_module_qualnames":{}}`
	base := `{"id":"5f0c","agent":{"kind":"ACPAgent","acp_model":"m-default","llm":{"api_key":"` + token + `","aws_secret_access_key":"plain-aws-secret","aws_session_token":null}},
		"workspace":{"kind":"LocalWorkspace","working_dir":"/w"},"persistence_dir":"/p","max_iterations":500,
		"stuck_detection":true,"execution_status":"finished","confirmation_policy":{"kind":"NeverConfirm"},
		"activated_knowledge_skills":[],"activated_path_rules":["r"],"invoked_skills":[],"blocked_actions":{},
		"blocked_messages":{},"head_is_empty":false,"stats":{"usage_to_metrics":{}},
		"secret_registry":{"secret_sources":{"X":{"kind":"StaticSecret","value":"` + token + `"}}},"tags":{},
		"agent_state":{"acp_available_models":[{"id":"m1"}],"acp_supports_runtime_model_switch":true}}`
	for name, body := range map[string]string{MetaFile: meta, BaseStateFile: base} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := ReadInfo(root, "conv")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range modelFields {
		if _, ok := got[k]; !ok {
			t.Errorf("the answer lacks the model's %q", k)
		}
	}
	for k := range got {
		if !InfoFields[k] {
			t.Errorf("the answer has %q, which ConversationInfo has not (the live answer drops it)", k)
		}
	}
	for k, want := range map[string]string{
		"current_model_id": `"m-default"`, "available_models": `[{"id":"m1"}]`, "supports_runtime_model_switch": "true",
		"execution_status": `"finished"`, "title": `"t"`, "sub_conversation_ids": "[]", "last_user_message_id": "null",
	} {
		if string(got[k]) != want {
			t.Errorf("%s = %s, want %s", k, got[k], want)
		}
	}
	if string(got["agent"]) != `{"acp_model":"m-default","kind":"ACPAgent","llm":{"api_key":"**********","aws_secret_access_key":"**********","aws_session_token":null}}` {
		t.Errorf("agent = %s, want every LLM secret field shown as the live answer shows it", got["agent"])
	}
	if strings.Contains(string(raw), token) || strings.Contains(string(raw), "plain-aws-secret") {
		t.Errorf("a stored token is in the answer: %s", raw)
	}
}
