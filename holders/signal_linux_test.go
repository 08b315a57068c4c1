package holders

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/internal/hermestest"
)

func refOf(t *testing.T, pid int) ProcRef {
	t.Helper()
	st, err := readStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return ProcRef{Pid: pid, StartTicks: st.StartTicks}
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSignalRefusesRecycledPid(t *testing.T) {
	_, w := startStore(t)
	ref := refOf(t, w.Pid)
	stale := ProcRef{Pid: ref.Pid, StartTicks: ref.StartTicks - 1}
	for name, f := range map[string]func(ProcRef) error{"Freeze": Freeze, "Kill": Kill, "Terminate": Terminate} {
		if err := f(stale); !errors.Is(err, ErrProcessGone) {
			t.Fatalf("%s of a pid with another start time: %v, want ErrProcessGone", name, err)
		}
	}
	if _, err := State(stale); !errors.Is(err, ErrProcessGone) {
		t.Fatalf("State: %v", err)
	}
	w.AcksGrow(t, 3)
	if s, err := State(ref); err != nil || s == 'T' {
		t.Fatalf("writer state %c, %v", s, err)
	}
}

func TestSignalRefusesExitedProcess(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot run sleep: %v", err)
	}
	ref := refOf(t, cmd.Process.Pid)
	cmd.Process.Kill()
	cmd.Wait()
	if err := Freeze(ref); !errors.Is(err, ErrProcessGone) {
		t.Fatalf("Freeze of a reaped process: %v", err)
	}
	if _, err := State(ref); !errors.Is(err, ErrProcessGone) {
		t.Fatalf("State: %v", err)
	}
	if err := WaitGone(waitCtx(t), ref); err != nil {
		t.Fatalf("WaitGone: %v", err)
	}
}

func TestSignalRefusesSelf(t *testing.T) {
	if err := Freeze(refOf(t, os.Getpid())); err == nil {
		t.Fatal("froze the test process itself")
	}
}

func TestFreezeThaw(t *testing.T) {
	_, w := startStore(t)
	ref := refOf(t, w.Pid)
	freezeStopped(t, ref)
	if s, err := State(ref); err != nil || s != 'T' {
		t.Fatalf("after freeze: state %c, %v", s, err)
	}
	if err := Thaw(ref); err != nil {
		t.Fatal(err)
	}
	hermestest.Eventually(t, "the writer to leave the stopped state", 5*time.Second, func() bool {
		s, err := State(ref)
		return err == nil && s != 'T'
	})
	w.AcksGrow(t, 3)
}

func TestKillFrozenWriterAndWaitGone(t *testing.T) {
	_, w := startStore(t)
	ref := refOf(t, w.Pid)
	freezeStopped(t, ref)
	if err := Kill(ref); err != nil {
		t.Fatal(err)
	}
	if err := WaitGone(waitCtx(t), ref); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	if _, err := State(ref); !errors.Is(err, ErrProcessGone) {
		t.Fatalf("State after exit: %v", err)
	}
	if err := Kill(ref); !errors.Is(err, ErrProcessGone) {
		t.Fatalf("Kill after exit: %v", err)
	}
}

func TestTerminateEndsWriter(t *testing.T) {
	_, w := startStore(t)
	ref := refOf(t, w.Pid)
	if err := Terminate(ref); err != nil {
		t.Fatal(err)
	}
	if err := WaitGone(waitCtx(t), ref); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
}

func TestWaitsHonourDeadline(t *testing.T) {
	_, w := startStore(t)
	ref := refOf(t, w.Pid)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := WaitGone(ctx, ref); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitGone on a live writer: %v", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	if err := WaitStopped(ctx2, ref); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitStopped on a running writer: %v", err)
	}
	if err := Signal(ref, unix.Signal(0)); err != nil {
		t.Fatalf("signal 0 (probe): %v", err)
	}
}
