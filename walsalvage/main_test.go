package walsalvage

import (
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// The tests start the test writer, which they build: Main removes it
// when they end.
func TestMain(m *testing.M) { hermestest.Main(m) }
