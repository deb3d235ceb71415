// Package testimage provides the container image ohd's Docker tests run:
// ohd-test-agent:dev, holding the standin agent server (integration/standin)
// as its command, a static ohctl, and this host's git with the shared
// libraries it needs, plus a minimal /bin/sh (and the host's stty and tty,
// to look at a terminal from inside).
//
// The image is built without any registry: Build assembles a root
// filesystem as a tar stream (Go binaries built with CGO_ENABLED=0, host
// files copied at their own paths, symlinks mirrored) and imports it through
// the Docker Engine API (POST /images/create?fromSrc=-). Nothing is pulled,
// so it works on an engine with no images at all.
//
// Ensure is what tests call. It builds the image only when it is missing or
// stale: the image carries the label dev.ohd.test-image.inputs, a SHA-256
// over every input (the module's Go sources the binaries and this recipe
// are built from, go.mod, go.sum, the Go version, and every host file copied
// with its path and mode); a differing label means rebuild. Concurrent test
// processes (go test runs packages in parallel) serialize on a flock of
// $TMPDIR/ohd-test-image-<tag>.lock, so one builds and the others then find
// the image current; different tags have different locks.
//
// Caveats: the host must be Linux and the engine must run the host's
// architecture, because the host's git binaries are copied into the image.
// The image has no package manager and no libc-based tools beyond git, sh,
// stty and tty; its ENV sets HOME=/tmp so git works as any uid with a read-only root
// filesystem and a tmpfs /tmp.
//
// Like the real agent server's image (shared reference §6), it has a user
// openhands (uid 10001, ImageUID) owning /workspace and /workspace/project
// (0755), and WORKDIR /: the stand-in's relative default conversations
// directory, workspace/conversations, is creatable only by that uid, so a
// container run as another uid without OH_CONVERSATIONS_PATH exits at
// start-up, as the real server does.
//
// Start at [Ensure] and [Ref] (testimage.go); the recipe is in build.go
// (the tar stream), inputs.go (what goes in, and the label over it) and
// layout.go (the users, directories and metadata of the image).
package testimage
