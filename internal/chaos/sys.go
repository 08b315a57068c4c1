package main

import (
	"errors"
	"runtime"
)

// errNoProcState is what the process and fd checks say where they cannot
// look: "unknown", never "clear".
var errNoProcState = errors.New("not checked on " + runtime.GOOS + ": needs Linux /proc")
