package integration

import (
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
)

// upgradeReleases are the releases TestHostGitUpgrade starts from:
// 716a702, whose in-place conversations had the repository's folder and
// .git writable in their container (no view), and 3a21a0b, the last
// release before the boundary of issue 26 (views, submodule .git files
// pinned, the agent as the repository's owner).
var upgradeReleases = []string{"716a702", "3a21a0b"}

// TestHostGitUpgrade: live in-place, worktree and plain-folder
// conversations made by an earlier release are taken over by this one on
// the same state directory, their containers made anew (issue 26,
// acceptance 4). Then the agent cannot move the user's main, and the
// whole attack table (hostgit_test.go) is run against those
// conversations: nothing the agent plants runs under the user's git.
func TestHostGitUpgrade(t *testing.T) {
	// Docker only by design: it starts from releases before issue 26, which had only the Docker runtime.
	testenv.RequireRoot(t)
	testenv.RequireDocker(t)
	newImage := testimage.Ensure(t)
	for _, rel := range upgradeReleases {
		rel := rel
		t.Run(rel, func(t *testing.T) { hostGitUpgrade(t, rel, newImage) })
	}
}

func hostGitUpgrade(t *testing.T, rel, newImage string) {
	start := time.Now()
	oldOhd, oldImage := buildRelease(t, rel)
	t.Logf("built release %s in %v", rel, time.Since(start).Round(time.Second))
	common := []string{"--memory", "268435456", "--ready-timeout", "60s"}
	d := startDaemon(t, daemonOptions{Runtime: "docker", Bin: oldOhd, Args: append([]string{"--image", oldImage}, common...)})
	t.Cleanup(func() { removeServerContainers(t, d) })

	var worlds []*hostGitWorld
	mainBefore := map[string]string{}
	var oldContainers []string
	for _, mode := range []byte("IWP") {
		w := newHostGitTree(t, mode)
		w.cases = casesOf(mode)[""]
		body := map[string]any{"workspace": map[string]any{"working_dir": w.tree}}
		if mode == 'W' {
			body["worktree"] = true
		}
		id, _ := d.apiCreate(body)
		old := d.record(id)
		t.Logf("%s made %c: in place %v, worktree %q, view %q, uid %d", rel, mode, old.InPlace, old.Worktree, old.GitView, old.UID)
		if old.ContainerID != "" {
			oldContainers = append(oldContainers, old.ContainerID)
		}
		w.conv = old
		mainBefore[w.main] = testenv.Git(t, w.main, "-c", "safe.directory=*", "rev-parse", "refs/heads/main")
		worlds = append(worlds, w)
	}

	// The upgrade: this release's ohd and image on the same state; the
	// containers are made anew (stopped first, as a host reboot or a
	// package upgrade leaves them).
	d.stop()
	for _, c := range oldContainers {
		run(t, "docker", "stop", "-t", "5", c)
	}
	d.restart(func(o *daemonOptions) {
		o.Bin = ""
		o.Args = append([]string{"--image", newImage}, common...)
	})
	for _, w := range worlds {
		id := w.conv.ID
		r := d.call("GET", "/api/conversations/"+id+"/events/search", nil)
		rec := d.record(id)
		t.Logf("after the upgrade %c: GET events = %d; in place %v, view %q, container %s, state %s, notes %q", w.mode, r.Status, rec.InPlace, rec.GitView, shortContainer(rec.ContainerID), rec.State, rec.Notes)
		if r.Status != 200 {
			// Stopped with a message saying why is the other acceptable
			// outcome; then there is no container to attack from.
			t.Errorf("%c: the upgraded conversation did not come back (%d %s); notes %q\n%s", w.mode, r.Status, clipN(string(r.Body), 400), rec.Notes, tail(d.logs.String(), 30))
			continue
		}
		if w.mode == 'I' && (!rec.InPlace || rec.GitView == "") {
			t.Errorf("the in-place conversation of %s has no git view after the upgrade: %+v", rel, rec)
		}
		w.adopt(rec)
	}

	// The agent tries to move the user's main: a commit on the branch its
	// HEAD names, and the ref itself.
	for _, w := range worlds {
		if w.mode == 'P' {
			continue
		}
		script := "cd " + w.repo + " && git -c user.name=a -c user.email=a@x commit -q --allow-empty -m agent-on-main; echo commit=$?; git update-ref refs/heads/main HEAD; echo update-ref=$?; git -c user.name=a -c user.email=a@x commit -q --allow-empty -m again && git branch -f main HEAD; echo branch=$?"
		_, out := d.execIn(w.conv.ID, "sh", "-c", script)
		t.Logf("%c: the agent's moves on main: %s", w.mode, clipN(out, 600))
	}
	checkMain := func(stage string) {
		for _, w := range worlds {
			if got := testenv.Git(t, w.main, "-c", "safe.directory=*", "rev-parse", "refs/heads/main"); got != mainBefore[w.main] {
				t.Errorf("%s, %c: the user's main moved from %s to %s: the agent committed to it", stage, w.mode, mainBefore[w.main], got)
			}
		}
	}
	checkMain("after the upgrade")

	var live []*hostGitWorld
	for _, w := range worlds {
		if w.conv.ContainerID != "" {
			live = append(live, w)
		}
	}
	attackWorlds(t, d, newHostUser(t), newMarkerBox(t), live)
	// (main is not checked after the attacks: gitlink-merged has the
	// user merge the agent's branch into it.)
	t.Logf("upgrade from %s took %v", rel, time.Since(start).Round(time.Second))
}

func shortContainer(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
