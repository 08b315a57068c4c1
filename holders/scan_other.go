//go:build !linux && !darwin

package holders

import (
	"runtime"
	"time"
)

func unsupported(targets []Target, o Options) *Result {
	start := time.Now()
	w := watchFor(targets, o)
	c := newCollector(w, o, -1)
	c.addBlind(Blind{UID: -1, Scope: ScopeScan, Reason: "no holder scan on " + runtime.GOOS + ": processes cannot be inspected"}, nil)
	res := c.result()
	res.Took = time.Since(start)
	return res
}

func scanAll(targets []Target, _ map[int]Process, o Options) (*Result, error) {
	return unsupported(targets, o), nil
}

func scanPids(targets []Target, _ []int, _ map[int]Process, o Options) (*Result, error) {
	return unsupported(targets, o), nil
}
