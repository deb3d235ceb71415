package conversation

import (
	"errors"
	"testing"

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
