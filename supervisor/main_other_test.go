//go:build !linux

package supervisor

import (
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// Off Linux the test binary doubles as no helper process: the rewrite
// benchmark and the forking-tool tests are Linux's (fanotify).
func TestMain(m *testing.M) {
	hermestest.RunWithOFDLocks(m)
}
