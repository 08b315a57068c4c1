package main

import (
	"os"
	"testing"

	"github.com/stateguard/stateguard/store"
)

// The in-process agent of the run tests uses SQLite's OFD locking, as
// main switches it on before anything opens SQLite.
func TestMain(m *testing.M) {
	if err := store.UseOFDLocks(); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}
