package broker

import (
	"encoding/json"
	"testing"
)

func TestAppendWhoamiMatchesEncodingJSON(t *testing.T) {
	conv := &Conversation{ID: "c", UID: 1000, GID: 1001, Epoch: 18446744073709551615,
		Grants: Grants{Secrets: []string{"a", "<b>&\"c\"\n"}, Git: []string{"github.com/acme"}}}
	got := string(appendWhoami(nil, "c", conv))
	want, _ := json.Marshal(whoamiBody{ID: "c", Epoch: conv.Epoch, UID: 1000, GID: 1001,
		Grants: Grants{Secrets: conv.Grants.Secrets, Git: conv.Grants.Git, LLM: []string{}, OAuth: []string{}, MCP: []string{}, Net: []string{}}})
	if got != string(want)+"\n" {
		t.Errorf("appendWhoami = %s, want %s", got, want)
	}
	gotErr := string(appendError(nil, "a \"b\" <c>", "not_granted"))
	wantErr, _ := json.Marshal(errorBody{Error: "a \"b\" <c>", Code: "not_granted"})
	if gotErr != string(wantErr)+"\n" {
		t.Errorf("appendError = %s, want %s", gotErr, wantErr)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "quote\" back\\slash", "\x00\x1f\x7f", "<script>&", "\u2028\u2029", "\xff\xfe", "héllo ☃", "\t\n\r\b\f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
	})
}
