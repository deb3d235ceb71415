package conversation

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/store"
)

func TestValidateGitHost(t *testing.T) {
	for _, c := range []struct {
		in      store.GitCredential
		want    store.GitCredential
		invalid bool
	}{
		{in: store.GitCredential{Host: "GitHub.com"}, want: store.GitCredential{Host: "github.com"}},
		{in: store.GitCredential{Host: "github.com", Scheme: "https", Auth: "Basic"}, want: store.GitCredential{Host: "github.com"}},
		{in: store.GitCredential{Host: "127.0.0.1:8080", Scheme: "http", Auth: "bearer"}, want: store.GitCredential{Host: "127.0.0.1:8080", Scheme: "http", Auth: "bearer"}},
		{in: store.GitCredential{Host: "localhost:3000", Scheme: "HTTP"}, want: store.GitCredential{Host: "localhost:3000", Scheme: "http"}},
		{in: store.GitCredential{Host: "github.com", Scheme: "http"}, invalid: true},
		{in: store.GitCredential{Host: "10.0.0.1", Scheme: "http"}, invalid: true},
		{in: store.GitCredential{Host: "github.com", Scheme: "ssh"}, invalid: true},
		{in: store.GitCredential{Host: "github.com", Auth: "digest"}, invalid: true},
		{in: store.GitCredential{Host: "github.com/acme"}, invalid: true},
	} {
		got := c.in
		err := ValidateGitHost(&got)
		if c.invalid {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%+v: %v, want ErrInvalid", c.in, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%+v: %+v %v, want %+v", c.in, got, err, c.want)
		}
	}
}

func TestValidateGrantsGitOptions(t *testing.T) {
	ok := store.Grants{Git: []string{"github.com/acme"}, GitOptions: map[string]store.GitGrantOptions{"github.com/acme": {Push: []string{"refs/heads/feature/*"}}}}
	if err := ValidateGrants(ok); err != nil {
		t.Fatal(err)
	}
	for _, g := range []store.Grants{
		{Git: []string{"github.com/acme"}, GitOptions: map[string]store.GitGrantOptions{"github.com": {Helper: true}}},
		{Git: []string{"github.com"}, GitOptions: map[string]store.GitGrantOptions{"github.com": {Push: []string{"main"}}}},
		{Git: []string{"github.com"}, GitOptions: map[string]store.GitGrantOptions{"github.com": {Push: []string{"refs/heads/../x"}}}},
	} {
		if err := ValidateGrants(g); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", g, err)
		}
	}
}

// The git relay configuration file reads back, through git itself, as the
// settings it was written from.
func TestGitConfigTextReadsBackWithGit(t *testing.T) {
	settings := [][2]string{
		broker.GitRelayConfig("", "github.com"),
		broker.GitRelayConfig("http", "127.0.0.1:8080"),
		{"core.editor", `a "quoted" \ value`},
	}
	path := filepath.Join(t.TempDir(), "gitconfig")
	if err := os.WriteFile(path, gitConfigText(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "config", "--file", path, "--null", "--list").Output()
	if err != nil {
		t.Fatalf("git config --list: %v", err)
	}
	var got [][2]string
	for _, e := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		k, v, _ := strings.Cut(e, "\n")
		got = append(got, [2]string{k, v})
	}
	if len(got) != len(settings) {
		t.Fatalf("git read %q, want %q", got, settings)
	}
	for i, kv := range settings {
		// git lower-cases section and variable names, not subsections.
		want := strings.ToLower(kv[0][:strings.IndexByte(kv[0], '.')]) + kv[0][strings.IndexByte(kv[0], '.'):strings.LastIndexByte(kv[0], '.')] +
			strings.ToLower(kv[0][strings.LastIndexByte(kv[0], '.'):])
		if got[i][0] != want || got[i][1] != kv[1] {
			t.Errorf("setting %d: git read %q = %q, want %q = %q", i, got[i][0], got[i][1], want, kv[1])
		}
	}
}
