package ohctl

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/store"
)

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
		// A tab or newline inside a cell would break the columns.
		cells[i] = strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return ' '
			}
			return r
		}, cells[i])
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// ago renders how long before now t was, coarsely ("5s", "3m", "2h", "4d").
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func printConversations(w io.Writer, convs []store.Conversation, now time.Time) {
	if len(convs) == 0 {
		fmt.Fprintln(w, "no conversations (create one with `ohctl create --repo PATH --worktree`)")
		return
	}
	header := []string{"ID", "STATE", "RUNTIME", "BRANCH", "WORKING DIR", "CONTAINER", "ACTIVE"}
	withKept := slices.ContainsFunc(convs, func(c store.Conversation) bool { return keptSummary(c) != "" })
	if withKept {
		header = append(header, "KEPT")
	}
	t := newTable(w, header...)
	for _, c := range convs {
		branch, dir := c.Branch, c.WorkingDir
		if r := c.Removal; r != nil && r.Done && c.Worktree != "" {
			// The worktree is gone; only a kept branch is still there.
			dir = "(removed)"
			if !r.BranchKept {
				branch = "(deleted)"
			}
		}
		row := []string{c.ID, string(c.State), c.Runtime, branch, dir, c.ContainerName, ago(now, c.LastActiveAt)}
		if withKept {
			row = append(row, keptSummary(c))
		}
		t.row(row...)
	}
	_ = t.flush()
	for _, c := range convs {
		if c.RemovalFailed != "" && c.State.Live() {
			fmt.Fprintf(w, "%s: %s\n", c.ID, c.RemovalFailed)
		}
	}
}

// keptSummary says what an ended conversation left in its repository:
// its branch, its snapshot, refs kept from its git view.
func keptSummary(c store.Conversation) string {
	r := c.Removal
	if r == nil || !r.Done {
		return ""
	}
	var parts []string
	if r.BranchKept {
		parts = append(parts, "branch")
	}
	if r.SnapshotRef != "" {
		parts = append(parts, "snapshot")
	}
	if n := len(r.Kept); n > 0 {
		parts = append(parts, fmt.Sprintf("%d view refs", n))
	}
	return strings.Join(parts, "+")
}

func printConversation(w io.Writer, c store.Conversation, now time.Time) {
	t := newTable(w, "FIELD", "VALUE")
	t.row("id", c.ID)
	t.row("state", string(c.State))
	t.row("runtime", c.Runtime)
	if mode, upgraded := c.EgressMode(); upgraded {
		t.row("egress", mode+" ("+store.UpgradedEgressNote+")")
	} else if mode != "" {
		t.row("egress", mode)
	}
	t.row("workspace", c.Workspace)
	t.row("working dir", c.WorkingDir)
	if c.InPlace {
		t.row("repository", c.Repo)
		t.row("in place", "the agent works in the folder itself; its git view "+c.GitView+" is mounted over the repository's git dir")
		t.row("branch", fmt.Sprintf("%s (the view's %s)", c.Branch, c.ViewBranch))
		if c.Published != "" {
			t.row("published", short(c.Published)+" on "+c.Branch)
		}
	}
	if c.Worktree != "" {
		t.row("repository", c.Repo)
		t.row("worktree", c.Worktree)
		t.row("branch", c.Branch)
		t.row("start point", fmt.Sprintf("%s (%s)", c.StartPoint, short(c.StartCommit)))
		switch c.GitLayout {
		case store.GitLayoutView:
			t.row("git view", c.GitView+" (the container's own; the host repository is read-only to it)")
		case store.GitLayoutShared:
			t.row("git view", "none: the container shares the repository's git dir (moved to its own view at its next start)")
		}
		if c.Published != "" {
			t.row("published", short(c.Published)+" on "+c.Branch)
		}
	}
	// In place as in a worktree (a commit held back, say).
	if c.PublishConflict != "" {
		t.row("publish conflict", c.PublishConflict)
	}
	if c.PublishError != "" {
		t.row("publish error", c.PublishError)
	}
	if c.Runtime != "local" {
		t.row("image", fmt.Sprintf("%s (%s)", c.Image, short(strings.TrimPrefix(c.ImageID, "sha256:"))))
		t.row("container", fmt.Sprintf("%s %s", c.ContainerName, short(c.ContainerID)))
		switch {
		case c.HostPort != 0 && c.Egress == store.EgressBroker: // (an upgraded record is open)
			t.row("inner address", fmt.Sprintf("127.0.0.1:%d in the container's network namespace (no network)", c.HostPort))
		case c.HostPort != 0:
			t.row("inner address", fmt.Sprintf("127.0.0.1:%d", c.HostPort))
		}
	}
	t.row("user", fmt.Sprintf("%d:%d", c.UID, c.GID))
	if c.Runtime != "local" && c.AgentUID != 0 {
		t.row("agent user", fmt.Sprintf("%d:%d (the container's; your git refuses what it owns)", c.AgentUID, c.AgentGID))
	}
	t.row("broker", c.BrokerDir)
	t.row("broker epoch", fmt.Sprint(c.BrokerEpoch))
	for _, kind := range store.Kinds {
		l := *c.Grants.List(kind)
		if kind == store.KindGit {
			l = gitGrantRoutes(c.Grants)
		}
		t.row("grants "+kind, strings.Join(l, ", "))
	}
	t.row("created", fmt.Sprintf("%s (%s ago)", c.CreatedAt.UTC().Format(time.RFC3339), ago(now, c.CreatedAt)))
	t.row("last active", fmt.Sprintf("%s ago", ago(now, c.LastActiveAt)))
	for _, n := range c.Notes {
		t.row("note", n)
	}
	if c.Error != "" {
		t.row("error", c.Error)
	}
	if c.RemovalFailed != "" && c.State.Live() {
		t.row("removal", c.RemovalFailed)
	}
	for _, s := range c.EngineStalls {
		t.row("engine stall", s)
	}
	if r := c.Removal; r != nil {
		t.row("removal", removalSummary(c))
		if r.SnapshotRef != "" {
			t.row("kept", r.SnapshotRef+" ("+short(r.SnapshotCommit)+"): uncommitted work")
		}
		for _, k := range r.Kept {
			t.row("kept", k)
		}
		for _, n := range r.NestedRepos {
			t.row("kept", n+"/: a nested repository's files, in the snapshot (not its history)")
		}
		for _, g := range r.GitDirsMoved {
			t.row("moved out", g+": a git directory the agent made, now under "+r.GitDirsKept)
		}
		if r.IgnoredFiles > 0 {
			t.row("not kept", fmt.Sprintf("%d ignored files (%d bytes)", r.IgnoredFiles, r.IgnoredBytes))
		}
		if r.Done && (r.BranchKept || r.SnapshotRef != "" || len(r.Kept) > 0) {
			t.row("restore", "ohctl restore "+c.ID+" [--into PATH]")
		}
	}
	_ = t.flush()
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func removalSummary(c store.Conversation) string {
	r := c.Removal
	if r == nil {
		return ""
	}
	if !r.Done {
		return "requested " + r.RequestedAt.UTC().Format(time.RFC3339) + ", not finished"
	}
	if r.Message != "" {
		return r.Message
	}
	return "done"
}

func printRemoval(w io.Writer, c store.Conversation) {
	fmt.Fprintf(w, "conversation %s removed\n", c.ID)
	r := c.Removal
	if r == nil {
		return
	}
	if r.SnapshotRef != "" {
		fmt.Fprintf(w, "uncommitted work saved as %s (%s)\n", r.SnapshotRef, short(r.SnapshotCommit))
	}
	if r.BranchKept {
		fmt.Fprintf(w, "branch %s kept in %s\n", c.Branch, c.Repo)
	}
	for _, k := range r.Kept {
		fmt.Fprintf(w, "kept from the conversation's git view: %s\n", k)
	}
	for _, n := range r.NestedRepos {
		fmt.Fprintf(w, "nested repository %s/ saved in the snapshot as files (its own history is not kept)\n", n)
	}
	if len(r.GitDirsMoved) > 0 {
		fmt.Fprintf(w, "moved out of your tree (git directories the agent made, which your git must never read): %s, now under %s\n", strings.Join(r.GitDirsMoved, ", "), r.GitDirsKept)
	}
	if r.IgnoredFiles > 0 {
		fmt.Fprintf(w, "not kept: %d ignored files (%d bytes)\n", r.IgnoredFiles, r.IgnoredBytes)
	}
	if r.Message != "" {
		fmt.Fprintln(w, r.Message)
	}
	if r.BranchKept || r.SnapshotRef != "" || len(r.Kept) > 0 {
		fmt.Fprintf(w, "get it back: ohctl restore %s [--into PATH]\n", c.ID)
	}
}

func printPrune(w io.Writer, rep control.PruneReport) {
	if len(rep.Items) == 0 {
		fmt.Fprintln(w, "nothing to prune")
		return
	}
	head := "DONE"
	if rep.DryRun {
		head = "WOULD"
	}
	t := newTable(w, head, "KIND", "ID", "PATH", "DETAIL")
	for _, it := range rep.Items {
		status := it.Action
		switch {
		case it.Action == "keep":
			status = "keep"
		case it.Error != "":
			status = "failed: " + it.Error
		case !rep.DryRun && !it.Done:
			status = "skipped"
		}
		t.row(status, it.Kind, it.ID, it.Path, it.Detail)
	}
	_ = t.flush()
}

func printDoctor(w io.Writer, rep control.DoctorReport) {
	if len(rep.Checks) == 0 {
		fmt.Fprintln(w, "no live conversations to check")
		return
	}
	t := newTable(w, "STATUS", "CONVERSATION", "CHECK", "DETAIL")
	for _, c := range rep.Checks {
		detail := c.Detail
		if c.Repair != "" {
			if c.Repaired {
				detail += " (repaired: " + c.Repair + ")"
			} else {
				detail += " (--repair would: " + c.Repair + ")"
			}
		}
		t.row(strings.ToUpper(c.Status), c.Conversation, c.Check, detail)
	}
	_ = t.flush()
}

func printAudit(w io.Writer, recs []store.AuditRecord) {
	if len(recs) == 0 {
		fmt.Fprintln(w, "no audit records")
		return
	}
	t := newTable(w, "TIME", "SOURCE", "CONVERSATION", "ROUTE", "KIND", "NAME", "PEER", "RESULT")
	for _, r := range recs {
		result := "allowed"
		if !r.Allowed {
			result = "refused"
			if why := r.Reason; why != "" || r.Code != "" {
				if why == "" {
					why = r.Code
				}
				result += " (" + why + ")"
			}
		}
		if r.Addr != "" {
			// An egress connection: where it went and what it carried.
			result += fmt.Sprintf(" via %s, %d B out, %d B in, %d ms", r.Addr, r.BytesOut, r.BytesIn, r.DurationMS)
		}
		peer := fmt.Sprintf("uid %d", r.PeerUID)
		if r.PeerPID != 0 {
			peer += fmt.Sprintf(" pid %d", r.PeerPID)
		}
		t.row(r.Time.UTC().Format("2006-01-02 15:04:05.000Z"), r.Source, r.Conversation, r.Route, r.Kind, r.Name, peer, result)
	}
	_ = t.flush()
}
