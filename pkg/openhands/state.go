package openhands

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNoState is returned by ReadInfo for a directory without meta.json:
// the agent server lists only directories holding one (ref §5, catalog
// load, conversation_service.py L658-698).
var ErrNoState = errors.New("openhands: no persisted conversation")

// Files of a persisted conversation (ref §5 "Metadata reads").
const (
	MetaFile      = "meta.json"       // StoredConversation
	BaseStateFile = "base_state.json" // ConversationState
	EventsDir     = "events"          // event-{idx:05d}-{event_id}.json
)

// Redacted is how the agent server shows a secret it does not expose
// (ref §1, "Serialize": redacted).
const Redacted = "**********"

// maxStateFile bounds what ReadInfo reads of one file.
const maxStateFile = 64 << 20

// metaFields are the StoredConversation fields ConversationInfo carries
// on top of base_state.json (ref §5: ConversationInfo, L404-480).
var metaFields = []string{
	"title", "metrics", "created_at", "updated_at", "forked_from_conversation_id", "forked_from_event_id",
	"parent_conversation_id", "client_tools", "launched_agent_profile",
}

// ReadInfo renders the ConversationInfo of the conversation persisted in
// dir (<conversations_path>/<id.hex>) as the agent server's docker runtime
// does while no container runs (ref §5 "Metadata reads"): all of
// base_state.json plus meta.json's metadata fields, execution_status read
// raw (default "idle"), and every secret redacted — a stored Fernet token
// (or a plaintext secret value) never leaves in an answer.
//
// Every component below root is opened without following symlinks, and
// only regular files are read: the directories belong to the
// conversation's uid and the agent writes them, while ohd reads them as
// root. rel are the components from root to the conversation's
// directory.
func ReadInfo(root string, rel ...string) (json.RawMessage, error) {
	dirfd, err := openDirNoFollow(root, rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, ErrNoState
		}
		return nil, err
	}
	defer unix.Close(dirfd)
	dir := filepath.Join(append([]string{root}, rel...)...)
	meta, err := readObject(dirfd, dir, MetaFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, ErrNoState
		}
		return nil, err
	}
	base, err := readObject(dirfd, dir, BaseStateFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if base == nil {
		base = map[string]json.RawMessage{}
	}
	for _, k := range metaFields {
		if v, ok := meta[k]; ok {
			base[k] = v
		}
	}
	if _, ok := base["id"]; !ok {
		base["id"] = meta["id"]
	}
	if _, ok := base["workspace"]; !ok && meta["workspace"] != nil {
		base["workspace"] = meta["workspace"]
	}
	if _, ok := base["execution_status"]; !ok {
		base["execution_status"] = json.RawMessage(`"idle"`)
	}
	if _, ok := base["tags"]; !ok {
		if t, ok := meta["tags"]; ok {
			base["tags"] = t
		}
	}
	if reg, ok := base["secret_registry"]; ok {
		base["secret_registry"] = redactSources(reg)
	}
	if a, ok := base["agent"]; ok {
		base["agent"] = redactLLMSecrets(a)
	}
	acpFields(base)
	for k, v := range infoDefaults {
		if _, ok := base[k]; !ok {
			base[k] = json.RawMessage(v)
		}
	}
	// ConversationInfo(**state.model_dump(), ...) ignores the state's
	// fields the model does not have (activated_path_rules,
	// head_is_empty): the answer has exactly the model's.
	for k := range base {
		if !InfoFields[k] {
			delete(base, k)
		}
	}
	out, err := json.Marshal(base)
	if err != nil {
		return nil, err
	}
	return RedactTokens(out), nil
}

// infoDefaults are the top-level ConversationInfo fields with their
// defaults, for those the persisted files leave out: base_state.json is
// written with exclude_none (state.py L437), so every None field is
// missing from it, and meta.json may lack the newer ones, while the live
// answer carries them all (models.py L123-337, _ConversationInfoBase and
// ConversationInfo; conversation_service.py L466-480 fills
// sub_conversation_ids, available_models, supports_runtime_model_switch).
var infoDefaults = map[string]string{
	"persistence_dir": "null", "confirmation_policy": `{"kind":"NeverConfirm"}`, "security_analyzer": "null",
	"activated_knowledge_skills": "[]", "invoked_skills": "[]", "blocked_actions": "{}", "blocked_messages": "{}",
	"last_user_message_id": "null", "leaf_event_id": "null", "agent_state": "{}", "hook_config": "null",
	"title": "null", "metrics": "null", "forked_from_conversation_id": "null", "forked_from_event_id": "null",
	"parent_conversation_id": "null", "sub_conversation_ids": "[]", "tags": "{}", "current_model_id": "null",
	"available_models": "[]", "supports_runtime_model_switch": "false", "launched_agent_profile": "null",
	"client_tools": "[]", "max_iterations": "500", "stuck_detection": "true",
	"stats": `{"usage_to_metrics":{}}`, "secret_registry": `{"secret_sources":{}}`,
}

// llmSecretFields are the LLM's SecretStr fields (llm.py L257-311): the
// live answer shows a value as Redacted whether it was persisted sealed
// or, by a server without a cipher, in clear.
var llmSecretFields = map[string]bool{"api_key": true, "aws_access_key_id": true, "aws_secret_access_key": true, "aws_session_token": true}

// redactLLMSecrets replaces the value of every LLM secret field in agent
// (agent.llm, the condenser's, ...) with Redacted.
func redactLLMSecrets(agent json.RawMessage) json.RawMessage {
	var v any
	dec := json.NewDecoder(bytes.NewReader(agent))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return agent
	}
	var walk func(any)
	walk = func(v any) {
		switch t := v.(type) {
		case map[string]any:
			for k, x := range t {
				if s, ok := x.(string); ok && llmSecretFields[k] && strings.TrimSpace(s) != "" {
					t[k] = Redacted
					continue
				}
				walk(x)
			}
		case []any:
			for _, x := range t {
				walk(x)
			}
		}
	}
	walk(v)
	out, err := json.Marshal(v)
	if err != nil {
		return agent
	}
	return out
}

// InfoFields are the fields of the agent server's ConversationInfo
// (models.py _ConversationInfoBase and ConversationInfo, L123-345 at
// software-agent-sdk 611629e), every one of which its answer carries.
var InfoFields = map[string]bool{
	"id": true, "workspace": true, "persistence_dir": true, "max_iterations": true, "stuck_detection": true,
	"execution_status": true, "confirmation_policy": true, "security_analyzer": true,
	"activated_knowledge_skills": true, "invoked_skills": true, "blocked_actions": true, "blocked_messages": true,
	"last_user_message_id": true, "leaf_event_id": true, "stats": true, "secret_registry": true, "agent_state": true,
	"hook_config": true, "title": true, "metrics": true, "created_at": true, "updated_at": true,
	"forked_from_conversation_id": true, "forked_from_event_id": true, "parent_conversation_id": true,
	"sub_conversation_ids": true, "tags": true, "current_model_id": true, "available_models": true,
	"supports_runtime_model_switch": true, "launched_agent_profile": true, "agent": true, "client_tools": true,
}

// acpFields sets current_model_id, available_models and
// supports_runtime_model_switch as the server composes them for a
// conversation it has loaded but not started (conversation_service.py
// _compose_conversation_info): from the hints an ACP agent persists in
// agent_state, current_model_id falling back to the agent's acp_model;
// absent, they take their defaults.
func acpFields(info map[string]json.RawMessage) {
	var st map[string]json.RawMessage
	_ = json.Unmarshal(info["agent_state"], &st)
	set := func(k string, v json.RawMessage) {
		if len(v) > 0 && !isFalsy(v) {
			info[k] = v
		}
	}
	set("current_model_id", st["acp_current_model_id"])
	if _, ok := info["current_model_id"]; !ok {
		var agent map[string]json.RawMessage
		_ = json.Unmarshal(info["agent"], &agent)
		set("current_model_id", agent["acp_model"])
	}
	set("available_models", st["acp_available_models"])
	if isFalsy(st["acp_supports_runtime_model_switch"]) {
		info["supports_runtime_model_switch"] = json.RawMessage("false")
	} else {
		info["supports_runtime_model_switch"] = json.RawMessage("true")
	}
}

// isFalsy reports whether a JSON value is missing or false in Python's
// sense (null, false, 0, "", [], {}).
func isFalsy(v json.RawMessage) bool {
	switch string(bytes.TrimSpace(v)) {
	case "", "null", "false", "0", `""`, "[]", "{}":
		return true
	}
	return false
}

// ColdStatus is the execution_status the agent server reports for a
// conversation loaded from disk with status st, with no process of its
// own running: a RUNNING one is stale and becomes ERROR
// (event_service.py L1140-1146, on load after a restart); every other
// status stays.
func ColdStatus(st string) string {
	if st == "running" {
		return "error"
	}
	return st
}

// WithStatus returns info with its execution_status set to st.
func WithStatus(info json.RawMessage, st string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(info, &m) != nil || m == nil {
		return info
	}
	m["execution_status"], _ = json.Marshal(st)
	out, err := json.Marshal(m)
	if err != nil {
		return info
	}
	return out
}

// Status returns the execution_status of an info (as ReadInfo renders
// it), "" if it has none.
func Status(info json.RawMessage) string {
	var v struct {
		S string `json:"execution_status"`
	}
	_ = json.Unmarshal(info, &v)
	return v.S
}

// openDirNoFollow opens root/rel... as a directory, refusing a symlink
// at every component below root.
func openDirNoFollow(root string, rel []string) (int, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	for _, c := range rel {
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: c, Err: err}
		}
		fd = next
	}
	return fd, nil
}

// readObject reads the JSON object in the regular file name of dirfd
// (never through a symlink, never blocking on a FIFO).
func readObject(dirfd int, dir, name string) (map[string]json.RawMessage, error) {
	path := filepath.Join(dir, name)
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("openhands: read %s: not a regular file", path)
	}
	var m map[string]json.RawMessage
	dec := json.NewDecoder(&limitReader{f: f, n: maxStateFile})
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("openhands: read %s: %w", path, err)
	}
	return m, nil
}

type limitReader struct {
	f *os.File
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("larger than %d bytes", maxStateFile)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.f.Read(p)
	l.n -= int64(n)
	return n, err
}

// redactSources replaces the value of every secret source of a
// secret_registry with Redacted (ref §1: conversation secrets,
// StaticSecret.value; a registry persisted without a cipher holds
// plaintext).
func redactSources(reg json.RawMessage) json.RawMessage {
	var r map[string]json.RawMessage
	if json.Unmarshal(reg, &r) != nil {
		return reg
	}
	var sources map[string]map[string]json.RawMessage
	if json.Unmarshal(r["secret_sources"], &sources) != nil {
		return reg
	}
	for _, s := range sources {
		if _, ok := s["value"]; ok {
			s["value"] = json.RawMessage(`"` + Redacted + `"`)
		}
		if h, ok := s["headers"]; ok {
			var hs map[string]string
			if json.Unmarshal(h, &hs) == nil {
				for k := range hs {
					if IsSecretKey(k) {
						hs[k] = Redacted
					}
				}
				s["headers"], _ = json.Marshal(hs)
			}
		}
	}
	r["secret_sources"], _ = json.Marshal(sources)
	out, _ := json.Marshal(r)
	return out
}

// RedactTokens replaces every JSON string in b that is a Fernet token
// (IsToken) with Redacted. b must be valid JSON; it is returned unchanged
// otherwise.
func RedactTokens(b []byte) []byte {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // integers stay exact
	if dec.Decode(&v) != nil {
		return b
	}
	out, err := json.Marshal(redact(v))
	if err != nil {
		return b
	}
	return out
}

func redact(v any) any {
	switch t := v.(type) {
	case string:
		if IsToken(t) {
			return Redacted
		}
	case map[string]any:
		for k, x := range t {
			t[k] = redact(x)
		}
	case []any:
		for i, x := range t {
			t[i] = redact(x)
		}
	}
	return v
}
