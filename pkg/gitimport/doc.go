// Package gitimport brings objects from an untrusted git view (the
// agent's) into the host repository's object store the way git receives a
// push: bounded, quarantined, checked, and only then migrated.
//
// # Where to start
//
// Importer.Import asks a Sandbox (where the view is) for a pack of what
// the given tips need and the host lacks (`ohctl view pack`), and imports
// it into a Repo; Importer.Present tells which objects the host has.
// A refusal wraps ErrRefused (often as a *RefusedError); RefusalReason
// names its reason for metrics. Package worktree imports every publish,
// save and mirror of a git view through an Importer.
//
// # Imports are bounded and quarantined
//
//  1. bounded: package packcheck reads the sandbox's pack and refuses it
//     from its entry and delta headers when it declares too many objects,
//     an object or a delta result too large, or too much in all
//     (Importer.Limits), before git reads a byte;
//  2. quarantined: `git index-pack --strict` (`unpack-objects --strict`
//     for a small pack) writes the objects into
//     <common-dir>/objects/incoming-ohd-* (QuarantinePrefix), the real
//     store its alternate, as receive-pack does;
//  3. checked: every tip must be complete, no tree nested deeper than
//     Importer.MaxTreeDepth, and each branch tip a commit;
//  4. migrated: only then are the objects renamed into the real store
//     (packs before their indexes). A refused import removes the
//     quarantine: nothing of it reaches the real store. A quarantine a
//     killed ohd left (older than Importer.Started) is removed by the next
//     import.
//
// Every git command runs through package hardgit, as the repository's
// owner.
package gitimport
