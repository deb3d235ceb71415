package openhands

import (
	"encoding/json"
	"testing"
)

func TestIncludeSkills(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		want    bool
		wantErr bool
	}{
		{nil, false, false},
		{[]string{"true"}, true, false},
		{[]string{"True"}, true, false},
		{[]string{"1"}, true, false},
		{[]string{"yes"}, true, false},
		{[]string{"on"}, true, false},
		{[]string{"false"}, false, false},
		{[]string{"0"}, false, false},
		{[]string{"off"}, false, false},
		{[]string{"true", "false"}, false, false}, // the last wins, as in FastAPI
		{[]string{"false", "t"}, true, false},
		{[]string{"maybe"}, false, true},
		{[]string{""}, false, true},
	} {
		got, err := IncludeSkills(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("IncludeSkills(%q) = %v, %v, want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestTrimSkills(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"id":"x","agent":{"kind":"Agent","agent_context":{"skills":[{"name":"git"}],"load_user_skills":true}}}`,
			`{"agent":{"agent_context":{"load_user_skills":true,"skills":[]},"kind":"Agent"},"id":"x"}`},
		{`{"id":"x","agent":{"agent_context":{"skills":[]}}}`, `{"id":"x","agent":{"agent_context":{"skills":[]}}}`},
		{`{"id":"x","agent":{"agent_context":null}}`, `{"id":"x","agent":{"agent_context":null}}`},
		{`{"id":"x"}`, `{"id":"x"}`},
		{`[1]`, `[1]`},
		{`not json`, `not json`},
	} {
		if got := string(TrimSkills(json.RawMessage(tc.in))); got != tc.want {
			t.Errorf("TrimSkills(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func FuzzTrimSkills(f *testing.F) {
	f.Add(`{"agent":{"agent_context":{"skills":[{"name":"git"}]}}}`)
	f.Add(`{"agent":{"agent_context":{"skills":"x"}}}`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, s string) {
		out := TrimSkills(json.RawMessage(s))
		if json.Valid([]byte(s)) && !json.Valid(out) {
			t.Fatalf("TrimSkills(%s) = %s: not JSON", s, out)
		}
	})
}
