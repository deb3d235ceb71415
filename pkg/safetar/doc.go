// Package safetar extracts a tar archive that a hostile party shaped (the
// files of an agent's container, read through the Engine API's archive
// endpoint) into a directory of the host without letting it reach
// anything else.
//
// Start with Extract. It writes regular files and directories only:
// symbolic and hard links, devices, FIFOs and every other entry type are
// skipped and counted (Result.Skipped), never created. An entry whose name
// is absolute, holds "..", or lies outside Options.Prefix is refused, and
// so is an archive beyond Options.MaxBytes (the sum of the regular files'
// sizes) or Options.MaxEntries. Every path is opened below the
// destination through an os.Root (openat with no following of a link out
// of it), each file is created new (O_EXCL) with mode 0600 and each
// directory 0700, owned by Options.UID and Options.GID. On a refusal the
// caller's destination is left as it was only if it extracts into a
// directory of its own and drops it (Extract does not undo what it wrote).
package safetar
