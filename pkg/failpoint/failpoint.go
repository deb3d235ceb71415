package failpoint

// Steps names every failpoint, in the order a create and a delete reach
// them. Tests iterate over it; Hit panics in failpoint builds on a name not
// listed here, so the list cannot drift from the code.
var Steps = []string{
	"create/after-record",
	"create/mid-view",
	"create/after-worktree",
	"create/after-broker",
	"create/after-container-created",
	"create/after-container-started",
	"create/after-start",
	"create/after-forward",
	"delete/after-mark",
	"delete/mid-snapshot",
	"delete/after-save",
	"delete/after-container",
	"delete/after-broker",
	"delete/mid-admin",
	"delete/after-trash",
	"delete/after-worktree",
	"release/mid-move",
	"publish/after-import",
	"publish/after-ref",
	"restore/after-journal",
	"restore/mid-checkout",
	"restore/mid-stash",
	"fork/after-inner",
	"exec/after-create",
	"exec/after-start",
}

// Switches name behaviours a failpoint build can switch on through
// OHD_FAILPOINTS, for tests that need a state today's ohd never makes:
//
//	legacy/shared-git-layout  new worktrees share the repository's git dir,
//	                          as conversations made before git views did
//	                          (the migration test makes them this way)
//	legacy/lend-late          no tree watcher and no periodic lending: what
//	                          the user makes mid-conversation stays theirs
//	                          (the control of the mid-conversation attack
//	                          test, with a default ACL that gives the agent
//	                          rwx put back by the test)
var Switches = []string{
	"legacy/shared-git-layout",
	"legacy/lend-late",
}
