package openhands

import (
	"encoding/json"
	"os"
	"path/filepath"
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
