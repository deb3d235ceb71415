package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// skillNames returns the names of agent.agent_context.skills in a
// ConversationInfo, and whether the field is there at all.
func skillNames(t *testing.T, info json.RawMessage) ([]string, bool) {
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
	if err := json.Unmarshal(info, &v); err != nil {
		t.Fatalf("not a ConversationInfo: %s", info)
	}
	if v.Agent.Context.Skills == nil {
		return nil, false
	}
	names := []string{}
	for _, s := range *v.Agent.Context.Skills {
		names = append(names, s.Name)
	}
	return names, true
}

// TestIncludeSkills checks the agent server's include_skills on every
// route that answers a ConversationInfo: skills trimmed to [] unless it is
// true, the disabled ones dropped, the persisted state untouched, and a
// bad value or two skills of one name refused.
func TestIncludeSkills(t *testing.T) {
	ts := newTestServer(t, Config{})
	dir := t.TempDir()
	const id = "6f9619ff-8b86-d011-b42d-00c04fc964ff"
	body := fmt.Sprintf(`{"conversation_id":%q,"workspace":{"working_dir":%q},"agent":{"llm":{"model":"m","api_key":"sk-standin-skill-test"},
		"agent_context":{"skills":[{"name":"git","content":"use git","trigger":{"type":"keyword","keywords":["git"]}},{"name":"docker","content":"use docker"},{"name":"noisy","content":"x"}],
		"disabled_skills":["noisy"],"load_user_skills":true,"load_public_skills":false}}}`, id, dir)
	for _, tc := range []struct {
		name, query string
		want        []string
	}{
		{"default", "", []string{}},
		{"false", "?include_skills=false", []string{}},
		{"true", "?include_skills=true", []string{"git", "docker"}},
		{"pydantic words", "?include_skills=YES", []string{"git", "docker"}},
		{"last value wins", "?include_skills=true&include_skills=0", []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := ts.do(t, "POST", "/api/conversations"+tc.query, body)
			if code != 201 && code != 200 {
				t.Fatalf("POST /api/conversations%s = %d %s", tc.query, code, out)
			}
			answers := map[string]json.RawMessage{"create": out}
			_, answers["get"] = ts.do(t, "GET", "/api/conversations/"+id+tc.query, "")
			sep := "?"
			if tc.query != "" {
				sep = "&"
			}
			_, batch := ts.do(t, "GET", "/api/conversations"+tc.query+sep+"ids="+id, "")
			answers["batch"] = mustJSON[[]json.RawMessage](t, batch)[0]
			_, search := ts.do(t, "GET", "/api/conversations/search"+tc.query, "")
			answers["search"] = mustJSON[struct{ Items []json.RawMessage }](t, search).Items[0]
			for route, info := range answers {
				got, ok := skillNames(t, info)
				if !ok {
					t.Errorf("%s%s: no agent.agent_context.skills in %s", route, tc.query, info)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("%s%s skills (-want +got):\n%s", route, tc.query, diff)
				}
				if strings.Contains(string(info), "sk-standin-skill-test") {
					t.Errorf("%s answers the LLM key: %s", route, info)
				}
			}
		})
	}
	// The persisted state keeps the (enabled) skills whatever was asked.
	base, err := os.ReadFile(filepath.Join(ts.srv.cfg.ConversationsPath, strings.ReplaceAll(id, "-", ""), "base_state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := skillNames(t, base); !cmp.Equal(got, []string{"git", "docker"}) {
		t.Errorf("base_state.json skills = %v, want [git docker]", got)
	}

	code, out := ts.do(t, "GET", "/api/conversations/"+id+"?include_skills=maybe", "")
	if code != 422 || !strings.Contains(string(out), `"bool_parsing"`) || !strings.Contains(string(out), `"include_skills"`) {
		t.Errorf("include_skills=maybe = %d %s, want 422 bool_parsing", code, out)
	}
	dup := fmt.Sprintf(`{"workspace":{"working_dir":%q},"agent":{"agent_context":{"skills":[{"name":"a","content":"1"},{"name":"a","content":"2"}]}}}`, dir)
	if code, out := ts.do(t, "POST", "/api/conversations", dup); code != 422 || !strings.Contains(string(out), "Duplicate skill name found: a") {
		t.Errorf("create with two skills named a = %d %s, want 422", code, out)
	}
}
