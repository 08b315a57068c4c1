package hermestest

import (
	"fmt"
	"testing"
	"time"
)

// Eventually polls cond every few milliseconds until it holds, and fails
// tb once d has passed without it: the wait of every real-process test,
// never a sleep standing in for an event.
func Eventually(tb testing.TB, what string, d time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitAcks waits until the writer has acknowledged at least n messages
// and returns them; it fails tb if the writer exits first or 30 s pass.
func (w *Writer) WaitAcks(tb testing.TB, n int) []Ack {
	tb.Helper()
	var acks []Ack
	Eventually(tb, "the writer's acks", 30*time.Second, func() bool {
		acks = w.Acks(tb)
		if len(acks) >= n {
			return true
		}
		if done, err := w.Exited(); done {
			tb.Fatalf("writer %d exited after %d of %d acks: %v", w.Pid, len(acks), n, err)
		}
		return false
	})
	return acks
}

// WaitAckFile waits until the ack file at path (a writer this test did
// not start through SpawnWriter) holds at least n acks.
func WaitAckFile(tb testing.TB, path string, n int) {
	tb.Helper()
	Eventually(tb, fmt.Sprintf("%d acks in %s", n, path), 20*time.Second, func() bool {
		acks, err := ReadAcks(path)
		if err != nil {
			tb.Fatal(err)
		}
		return len(acks) >= n
	})
}

// AcksGrow waits until the writer has acknowledged n more messages than
// it had when called: it is still committing.
func (w *Writer) AcksGrow(tb testing.TB, n int) {
	tb.Helper()
	w.WaitAcks(tb, len(w.Acks(tb))+n)
}

// Loop calls f again and again, pausing every between calls, on a
// goroutine of its own, until the returned stop is called; stop returns
// once f has returned for the last time. It is load for a test to run
// beside (a process closing a store's fds, say), not a wait.
func Loop(every time.Duration, f func()) (stop func()) {
	quit, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-quit:
				return
			default:
			}
			f()
			time.Sleep(every)
		}
	}()
	return func() { close(quit); <-stopped }
}
