// Package packgen writes git packs for tests, including the hostile ones a
// compromised container sends: delta bombs, packs that declare a million
// objects, trees nested ten thousand deep, .gitmodules blobs git's fsck
// refuses.
//
// Start with Writer: Begin writes the header, Object and OfsDelta add
// entries, End writes the checksum. The helpers (DeltaBomb, DeepTree,
// Commit) build the attack payloads from it. Object ids are SHA-1.
package packgen
