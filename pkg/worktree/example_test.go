package worktree_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ohd-dev/ohd/pkg/worktree"
)

// Example shows a conversation's worktree life as the orchestrator drives
// it: inspect the workspace, add the worktree, mount it into the
// container, and remove it (after the container has stopped).
func Example() {
	ctx := context.Background()
	m, err := worktree.New(worktree.Options{
		Root:    "/var/lib/ohd/worktrees",
		LockDir: "/var/lib/ohd/locks",
	})
	if err != nil {
		log.Fatal(err)
	}
	repo, err := m.Inspect(ctx, "/home/alice/src/project")
	if err != nil {
		log.Fatal(err) // errors.Is(err, worktree.ErrInvalidPath): tell the user
	}
	if !repo.IsGit {
		fmt.Println("no worktree: the workspace is mounted at its own path")
		return
	}
	id := "123e4567-e89b-12d3-a456-426614174000"
	wt, err := m.Add(ctx, worktree.AddOptions{Repo: repo, ConversationID: id})
	if err != nil {
		log.Fatal(err)
	}
	// Persist wt, then give the container these mounts, run it as
	// wt.UID:wt.GID with worktree.ContainerGitConfig() in its environment,
	// and use wt.Path (plus repo.Prefix) as its working directory.
	mounts, err := m.MountPlan(wt)
	if err != nil {
		log.Fatal(err)
	}
	for _, mt := range mounts {
		fmt.Println(mt.Source, mt.ReadOnly)
	}
	// ... the conversation runs; its container is stopped ...
	res, err := m.Remove(ctx, wt, worktree.RemoveOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Message)
}
