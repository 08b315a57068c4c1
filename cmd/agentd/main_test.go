package main

import (
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// The in-process agent of the run tests uses SQLite's OFD locking, as
// main switches it on before anything opens SQLite.
func TestMain(m *testing.M) { hermestest.RunWithOFDLocks(m) }
