package main

import (
	"os"
	"testing"

	"github.com/stateguard/stateguard/store"
)

// The in-process agent of the daemon tests runs with SQLite's OFD locking;
// the test process must switch before its first SQLite open (creating a
// fixture store included), as agentd does.
func TestMain(m *testing.M) {
	if err := store.UseOFDLocks(); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}
