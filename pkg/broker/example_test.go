package broker_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/broker/brokertest"
)

// The daemon's side: one Broker, one Open per live conversation.
func ExampleBroker_Open() {
	masterKey := []byte("the daemon's master key (32 random bytes in real life)")
	backend := brokertest.New() // ohd implements broker.Backend on its store
	b, err := broker.New(broker.Options{
		RuntimeDir: "/run/ohd",
		Key:        broker.DeriveKey(masterKey),
		Backend:    backend,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Shutdown(context.Background())

	conv := broker.Conversation{ID: "0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1b", UID: 1000, GID: 1000, Epoch: 1,
		Grants: broker.Grants{Git: []string{"github.com/acme"}, LLM: []string{"default"}}}
	ep, err := b.Open(context.Background(), conv)
	if err != nil {
		log.Fatal(err)
	}
	// Bind-mount ep.Dir read-only at /run/ohd in the container.
	fmt.Println(ep.Dir)
}

// The container's side: ask for a secret, and call the LLM through the
// proxy without ever holding its key.
func ExampleClient() {
	c := broker.NewClient(os.Getenv(broker.EnvSocket), os.Getenv(broker.EnvTokenFile))
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Secret(ctx, "npm-token"); err != nil {
		log.Print(err) // broker.ErrNotGranted if not granted or missing
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://ohd-broker/v1/llm/default/proxy/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-x","messages":[]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status)
}

// ohctl git-credential runs this; git calls it as
// credential.helper = /run/ohd/bin/ohctl git-credential.
func ExampleGitCredentialHelper() {
	if err := broker.GitCredentialHelper(context.Background(), os.Args[len(os.Args)-1], os.Stdin, os.Stdout, os.Stderr, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "ohctl git-credential:", err)
		os.Exit(1)
	}
}
