// Package version says which stateguard this binary is: the module
// version and VCS revision the Go toolchain stamped into the build info,
// the Go version, the platform and the SQLite embedded through
// modernc.org/sqlite. agentd and agentctl print it (`version`,
// `--version`), and it carries the labels of the stateguard_build_info
// gauge.
//
// A package built from a tag sets the version at link time, since a build
// from a source archive has no VCS information to stamp:
//
//	go build -ldflags "-X github.com/stateguard/stateguard/internal/version.version=1.4.0" ./cmd/agentd
package version
