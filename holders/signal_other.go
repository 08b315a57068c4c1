//go:build !linux

package holders

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
)

// Signalling through a pidfd after a start-time check is Linux-only; a
// kill(2) by pid could hit a recycled pid, so other OSes refuse.
func errNoSignals(p ProcRef) error {
	return fmt.Errorf("signal pid %d: safe signalling is not implemented on %s", p.Pid, runtime.GOOS)
}

func Signal(p ProcRef, _ syscall.Signal) error       { return errNoSignals(p) }
func Freeze(p ProcRef) error                         { return errNoSignals(p) }
func Thaw(p ProcRef) error                           { return errNoSignals(p) }
func Kill(p ProcRef) error                           { return errNoSignals(p) }
func Terminate(p ProcRef) error                      { return errNoSignals(p) }
func State(p ProcRef) (byte, error)                  { return 0, errNoSignals(p) }
func WaitStopped(_ context.Context, p ProcRef) error { return errNoSignals(p) }
func WaitGone(_ context.Context, p ProcRef) error    { return errNoSignals(p) }
