// Package packcheck reads a git pack stream and refuses it, before git
// sees it, when what it declares is larger than the limits: more objects
// than allowed, an object (or a delta's result) larger than allowed, more
// bytes in all than allowed. Git's own bound on a received pack
// (`--max-input-size`) counts the pack's bytes, not what its objects expand
// to, so a 16 KiB pack whose delta declares a 16 GiB result passes it and
// makes git allocate the result; here the delta's header is read and the
// pack is refused after a few hundred bytes.
//
// # Where to start
//
// Copy reads a pack from a reader, checks every entry's header (and, for a
// delta, the base and result sizes at the start of its data), checks each
// entry's compressed data inflates to exactly its declared size, checks
// the trailing checksum, and writes the bytes it read, unchanged, to a
// writer: a file that git's index-pack reads only when Copy returned nil.
// Memory is O(1) in the pack's size: nothing is kept but a small buffer.
//
// The format is git's Documentation/gitformat-pack.txt: a 12-byte header
// ("PACK", version 2 or 3, object count), entries (a type-and-size header
// whose size is the inflated size; OFS_DELTA adds a negative offset,
// REF_DELTA the base's object id; then zlib data), and the pack's hash.
// A delta's data starts with two size varints: the base's size and the
// result's.
package packcheck
