package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A fork takes its parent's own credentials under its own names: each
// secret sealed again under the new name (it opens there, and only
// there), profiles and MCP servers pointing at the copies, the parent's
// untouched, nothing in clear in the file, and the grants renamed.
func TestCopyScopedResealsUnderTheNewNames(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s := openStore(t, path, newKey(t, 3))
	from, to, other := NewID(), NewID(), NewID()
	const key, header = "PLAINTEXT-LLM-KEY-4242", "PLAINTEXT-MCP-HEADER-99"
	must(t, s.SetSecret(from+".llm.key", []byte(key)))
	must(t, s.PutLLMProfile(LLMProfile{Name: from + ".llm", Model: "m", BaseURL: "http://b", KeySecret: from + ".llm.key"}))
	must(t, s.SetSecret(from+".mcp.s.h0", []byte(header)))
	must(t, s.PutMCPServer(MCPServer{Name: from + ".mcp.s", URL: "http://m", Headers: []MCPHeader{{Name: "X-Key", Secret: from + ".mcp.s.h0"}}}))
	must(t, s.SetSecret(other+".x", []byte("not copied")))
	must(t, s.SetSecret("operator", []byte("global")))

	var g Grants
	g.Add(KindLLM, from+".llm")
	g.Add(KindMCP, from+".mcp.s")
	g.Add(KindSecret, "operator")
	got, err := s.CopyScoped(from, to, g)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.LLM, []string{to + ".llm"}) || !slices.Equal(got.MCP, []string{to + ".mcp.s"}) || !slices.Equal(got.Secrets, []string{"operator"}) {
		t.Errorf("grants = %+v; want the parent's renamed, the operator's kept", got)
	}
	if v, err := s.Secret(to + ".llm.key"); err != nil || string(v) != key {
		t.Errorf("Secret(copy) = %q, %v", v, err)
	}
	if v, err := s.Secret(from + ".llm.key"); err != nil || string(v) != key {
		t.Errorf("Secret(parent's) after the copy = %q, %v", v, err)
	}
	p, err := s.LLMProfile(to + ".llm")
	if err != nil || p.KeySecret != to+".llm.key" || p.BaseURL != "http://b" {
		t.Errorf("LLMProfile(copy) = %+v, %v", p, err)
	}
	m, err := s.MCPServer(to + ".mcp.s")
	if err != nil || len(m.Headers) != 1 || m.Headers[0].Secret != to+".mcp.s.h0" {
		t.Errorf("MCPServer(copy) = %+v, %v", m, err)
	}
	if _, err := s.Secret(to + ".x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another conversation's secret was copied: %v", err)
	}
	// Sealed under its own name: the copy's record does not open as the
	// parent's (and the other way round).
	dump, err := s.Dump()
	must(t, err)
	if dump["secrets/"+to+".llm.key"] == dump["secrets/"+from+".llm.key"] {
		t.Error("the copy holds the parent's sealed bytes: not sealed again")
	}
	// A second copy onto the same names copies nothing.
	if _, err := s.CopyScoped(from, to, g); !errors.Is(err, ErrExists) {
		t.Errorf("second CopyScoped = %v; want ErrExists", err)
	}
	if n, err := s.DeleteScoped(to); err != nil || n != 4 {
		t.Errorf("DeleteScoped(copy) = %d, %v; want its 2 secrets, 1 profile, 1 server", n, err)
	}
	must(t, s.Close())
	data, err := os.ReadFile(path)
	must(t, err)
	for _, v := range []string{key, header} {
		if bytes.Contains(data, []byte(v)) {
			t.Errorf("%s appears in clear in the store file", v)
		}
	}
}
