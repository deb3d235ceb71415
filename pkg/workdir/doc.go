// Package workdir makes a conversation's missing working directory, as
// the OpenHands agent server does for a create whose working_dir does not
// exist (Agent Canvas's default new conversation sends
// <home>/workspace/project/<hex>; the server makes it with
// Path.mkdir(parents=True, exist_ok=True), ref §9 "worktree"), but only
// under a root the operator allows, and safely although ohd may run as
// root:
//
//   - the path must be absolute, clean, and strictly inside one of the
//     roots (lexically; the roots are resolved by the caller);
//   - the walk starts at the root and opens each existing component with
//     O_NOFOLLOW|O_DIRECTORY relative to its parent's descriptor (openat),
//     so a symlink anywhere below the root (planted before or during the
//     walk) is refused, never followed;
//   - each missing component is made with mkdirat (mode 0755, as Python's
//     default 0777 under the usual umask 022) relative to the same
//     descriptor, and given the owner of the nearest existing ancestor
//     (fchownat without following), so the user the folder belongs
//     with owns it, not ohd.
//
// Start at Make; Made.Undo removes what Make made when the create fails.
package workdir
