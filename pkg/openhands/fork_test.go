package openhands

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A fork's state moves to its own conversation: relay URLs and host paths
// of the source name the fork's, tokens are sealed again for the fork's
// cipher, events are copied byte for byte, and nothing is read through a
// symlink the source's agent planted.
func TestCopyForkStateRewritesForTheFork(t *testing.T) {
	const from, to = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
	root := t.TempDir()
	src := filepath.Join(root, from, "conversations", "22222222222242228222222222222222")
	if err := os.MkdirAll(filepath.Join(src, EventsDir), 0o700); err != nil {
		t.Fatal(err)
	}
	oldF, newF := NewFernet("old-key"), NewFernet("new-key")
	tok, err := oldF.Encrypt([]byte("http://127.0.0.1:8751/secrets/" + from + ".GITHUB_TOKEN"))
	if err != nil {
		t.Fatal(err)
	}
	meta := `{"id":"` + to + `","workspace":{"kind":"LocalWorkspace","working_dir":"/w/parent"},"forked_from_conversation_id":"` + from + `","forked_from_event_id":"e1","secrets":{"GITHUB_TOKEN":{"kind":"LookupSecret","url":"http://127.0.0.1:8751/secrets/` + from + `.GITHUB_TOKEN"}},"title":"<t>"}`
	base := `{"id":"` + to + `","persistence_dir":"` + filepath.Join(root, from) + `/conversations/x","agent":{"llm":{"base_url":"http://127.0.0.1:8751/llm/` + from + `.llm","api_key":"` + tok + `"}},"max_iterations":500}`
	event := `{"id":"e1","kind":"MessageEvent","source":"user","note":"/w/parent stays in history"}`
	for name, body := range map[string]string{MetaFile: meta, BaseStateFile: base, filepath.Join(EventsDir, "event-00000-e1.json"): event} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(root, "host-secret")
	if err := os.WriteFile(secret, []byte("HOST-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(src, EventsDir, "event-00001-planted.json")); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(root, to, "conversations", "22222222222242228222222222222222")
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		t.Fatal(err)
	}
	mv := ForkMove{From: from, To: to, Old: oldF, New: newF, Relay: "http://127.0.0.1:8751",
		Paths: [][2]string{{filepath.Join(root, from), filepath.Join(root, to)}, {"/w/parent", "/w/child"}}}
	if err := CopyForkState(root, []string{from, "conversations", filepath.Base(src)}, dst, os.Getuid(), os.Getgid(), mv); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	m := read(MetaFile)
	for _, want := range []string{`"working_dir":"/w/child"`, `/secrets/` + to + `.GITHUB_TOKEN`, `"forked_from_conversation_id":"` + from + `"`, `"title":"<t>"`} {
		if !strings.Contains(m, want) {
			t.Errorf("meta.json lacks %s:\n%s", want, m)
		}
	}
	var b struct {
		Persistence string `json:"persistence_dir"`
		Agent       struct {
			LLM struct {
				BaseURL string `json:"base_url"`
				APIKey  string `json:"api_key"`
			} `json:"llm"`
		} `json:"agent"`
	}
	if err := json.Unmarshal([]byte(read(BaseStateFile)), &b); err != nil {
		t.Fatal(err)
	}
	if b.Persistence != filepath.Join(root, to)+"/conversations/x" || b.Agent.LLM.BaseURL != "http://127.0.0.1:8751/llm/"+to+".llm" {
		t.Errorf("base_state.json = %+v", b)
	}
	if _, err := oldF.Decrypt(b.Agent.LLM.APIKey); err == nil {
		t.Error("the token still opens with the source's cipher")
	}
	if p, err := newF.Decrypt(b.Agent.LLM.APIKey); err != nil || string(p) != "http://127.0.0.1:8751/secrets/"+to+".GITHUB_TOKEN" {
		t.Errorf("token under the fork's cipher = %q, %v", p, err)
	}
	if got := read(filepath.Join(EventsDir, "event-00000-e1.json")); got != event {
		t.Errorf("event = %s; want it as it was", got)
	}
	if _, err := os.Lstat(filepath.Join(dst, EventsDir, "event-00001-planted.json")); !os.IsNotExist(err) {
		t.Errorf("a planted symlink was copied (or followed): %v", err)
	}
	if err := CopyForkState(root, []string{from, "conversations", filepath.Base(src)}, dst, os.Getuid(), os.Getgid(), mv); err == nil {
		t.Error("a second copy onto the fork's directory succeeded")
	}
	if err := CopyForkState(root, []string{from, "conversations", "nope"}, filepath.Join(root, "x"), 0, 0, mv); err != ErrNoState {
		t.Errorf("missing source = %v; want ErrNoState", err)
	}
}
