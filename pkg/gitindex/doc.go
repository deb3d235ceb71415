// Package gitindex reads what ohd needs from a git index file (the
// "DIRC" file git keeps at <git dir>/index) without running git: the
// paths of its gitlinks, the submodules a work tree's mount plan protects.
// git ls-files --stage prints every entry of the index to find them, which
// for a large repository is a git process and a megabyte of output (13 ms
// for 10,000 files, on the way of every create of such a repository).
//
// Start with [Gitlinks]. It reads index versions 2, 3 and 4 with SHA-1
// object names and checks the file's trailing checksum; anything else (a
// SHA-256 repository, a split index, a sparse index, a checksum git did
// not write, a file that is not a regular file of the expected owner) is
// [ErrUnsupported], and the caller asks git instead. The file may come
// from anyone who can write a git directory, so every length is checked
// before it is used and the whole file is bounded (FuzzGitlinks).
//
// Reference: git's Documentation/gitformat-index.txt.
package gitindex
