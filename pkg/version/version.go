// Package version holds ohd's version string, shared by ohd and ohctl
// without pulling the daemon's dependencies into ohctl.
package version

// Version is set at build time:
// -ldflags "-X github.com/ohd-dev/ohd/pkg/version.Version=v1.2.3".
var Version = "dev"

// APIVersion is the control API's version; it changes only with an
// incompatible change of the control API.
const APIVersion = "v1"
