package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// skillsOf returns the names in agent.agent_context.skills of a
// ConversationInfo, failing t when the field is missing.
func skillsOf(t *testing.T, what string, info []byte) []string {
	t.Helper()
	var v struct {
		Agent struct {
			Context struct {
				Skills *[]struct {
					Name string `json:"name"`
				} `json:"skills"`
			} `json:"agent_context"`
		} `json:"agent"`
	}
	if err := json.Unmarshal(info, &v); err != nil || v.Agent.Context.Skills == nil {
		t.Fatalf("%s: no agent.agent_context.skills in %s (%v)", what, info, err)
	}
	names := []string{}
	for _, s := range *v.Agent.Context.Skills {
		names = append(names, s.Name)
	}
	return names
}

// TestBackendIncludeSkills creates conversations through ohd with and
// without include_skills and reads them back every way the agent server
// answers a ConversationInfo, with the container running (the stand-in
// answers) and stopped (ohd answers from the inner state on the host):
// the skills are trimmed to [] unless include_skills is true, as the
// real server does (conversation_router.py, trim_conversation_response_skills),
// while the persisted state keeps them.
func TestBackendIncludeSkills(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		body := func(id string) map[string]any {
			return map[string]any{
				"conversation_id": id, "worktree": true,
				"workspace": map[string]any{"kind": "LocalWorkspace", "working_dir": repo},
				"agent": map[string]any{"kind": "Agent", "agent_context": map[string]any{
					"skills": []any{
						map[string]any{"name": "git", "content": "Commit small.", "trigger": map[string]any{"type": "keyword", "keywords": []string{"git"}}},
						map[string]any{"name": "docker", "content": "Pin images."},
						map[string]any{"name": "noisy", "content": "Disabled."},
					},
					"disabled_skills": []string{"noisy"},
				}},
			}
		}
		all := []string{"git", "docker"} // what the server loads: noisy is disabled
		trimmed, full := store.NewID(), store.NewID()

		r := d.call("POST", "/api/conversations", body(trimmed))
		if r.Status != 201 {
			t.Fatalf("create = %d %s\n%s", r.Status, r.Body, tail(d.logs.String(), 30))
		}
		if got := skillsOf(t, "create", r.Body); !cmp.Equal(got, []string{}) {
			t.Errorf("create without include_skills answers skills %v, want []", got)
		}
		r = d.call("POST", "/api/conversations?include_skills=true", body(full))
		if r.Status != 201 {
			t.Fatalf("create ?include_skills=true = %d %s", r.Status, r.Body)
		}
		if got := skillsOf(t, "create ?include_skills=true", r.Body); !cmp.Equal(got, all) {
			t.Errorf("create ?include_skills=true answers skills %v, want %v", got, all)
		}
		// A retried create answers the existing conversation, by the same rule.
		if r := d.call("POST", "/api/conversations?include_skills=true", body(trimmed)); r.Status != 200 || !cmp.Equal(skillsOf(t, "retried create", r.Body), all) {
			t.Errorf("retried create ?include_skills=true = %d %s, want 200 with skills %v", r.Status, r.Body, all)
		}

		// Both conversations hold the skills, whatever their create answered.
		for _, id := range []string{trimmed, full} {
			inner := openhands.DirsOf(filepath.Join(d.dirs.State, "inner"), id)
			base, err := os.ReadFile(filepath.Join(inner.StateDir(id), openhands.BaseStateFile))
			if err != nil {
				t.Fatal(err)
			}
			if got := skillsOf(t, "base_state.json", base); !cmp.Equal(got, all) {
				t.Errorf("%s: base_state.json on the host keeps skills %v, want %v", id, got, all)
			}
		}

		reads := func(source string) {
			t.Helper()
			for _, q := range []struct {
				query string
				want  []string
			}{
				{"", []string{}},
				{"include_skills=false", []string{}},
				{"include_skills=true", all},
				{"include_skills=1", all},
			} {
				get := d.call("GET", "/api/conversations/"+trimmed+"?"+q.query, nil)
				if get.Status != 200 || get.Header.Get("X-Ohd-Source") != source {
					t.Errorf("GET ?%s = %d from %q, want 200 from %s: %s", q.query, get.Status, get.Header.Get("X-Ohd-Source"), source, get.Body)
					continue
				}
				if got := skillsOf(t, "GET", get.Body); !cmp.Equal(got, q.want) {
					t.Errorf("%s: GET ?%s answers skills %v, want %v", source, q.query, got, q.want)
				}
				var batch []json.RawMessage
				d.call("GET", "/api/conversations?ids="+trimmed+"&"+q.query, nil).json(t, &batch)
				if got := skillsOf(t, "?ids=", batch[0]); !cmp.Equal(got, q.want) {
					t.Errorf("%s: ?ids= &%s answers skills %v, want %v", source, q.query, got, q.want)
				}
				var page struct{ Items []json.RawMessage }
				d.call("GET", "/api/conversations/search?"+q.query, nil).json(t, &page)
				if len(page.Items) != 2 {
					t.Fatalf("search = %d items, want 2", len(page.Items))
				}
				for _, it := range page.Items {
					if got := skillsOf(t, "search", it); !cmp.Equal(got, q.want) {
						t.Errorf("%s: search ?%s answers skills %v, want %v", source, q.query, got, q.want)
					}
				}
			}
			if r := d.call("GET", "/api/conversations/"+trimmed+"?include_skills=maybe", nil); r.Status != 422 || !strings.Contains(string(r.Body), "bool_parsing") {
				t.Errorf("%s: GET ?include_skills=maybe = %d %s, want 422 bool_parsing", source, r.Status, r.Body)
			}
		}
		reads("inner")

		// No container: ohd answers from the host files, by the same rule.
		for _, id := range []string{trimmed, full} {
			b.stop(t, d.record(id).ContainerID)
			waitFor(t, 10*time.Second, "ohd to notice the stop", func() bool { return d.record(id).State == store.StateStopped })
		}
		reads("host")
	})
}
