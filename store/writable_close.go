package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// closeCheckpointBudget bounds Close's retries of a refused final
// checkpoint. A reader's transaction or a writer's commit is over in
// milliseconds; a longer refusal is left to the caller's own retry (the
// agent's replay job runs again, and its checkpoint with it) rather than
// holding the store's worker.
const closeCheckpointBudget = 2 * time.Second

// ErrCheckpointIncomplete is Close's error when the rows this connection
// committed could not all be checkpointed into the main file: they are
// committed and durable in the -wal, but only there, so a lost -wal would
// lose them. Every caller must say so and retry; none may treat the close
// as clean.
var ErrCheckpointIncomplete = errors.New("checkpoint incomplete: committed rows are only in the -wal")

// Close checkpoints what this connection committed (see Checkpoint),
// retrying a checkpoint that left frames out of the main with backoff for
// up to about 2 s (one the CheckpointGate held is not retried), and
// closes the connection. PERSIST_WAL keeps -wal and -shm in place. When
// the checkpoint is still refused (a reader's snapshot, a writer, the
// CheckpointGate, an error) the connection is closed anyway and the error
// wraps ErrCheckpointIncomplete: the rows are in the -wal, not the main.
func (w *Writable) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var err error
	if w.conn != nil {
		if w.dirty {
			err = w.finalCheckpointLocked()
		}
		if cerr := w.conn.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close %s: %w", w.path, cerr))
		}
		w.conn = nil
	}
	if cerr := w.db.Close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close %s: %w", w.path, cerr))
	}
	return err
}

// finalCheckpointLocked is Close's checkpoint: the only one that copies
// the rows of a replay or an adopt into the main file. It never waits on
// a lock (TruncateCheckpoint), so it is retried instead.
func (w *Writable) finalCheckpointLocked() error {
	deadline := time.Now().Add(w.closeBudget)
	backoff := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		cp, err := w.checkpointLocked(context.Background())
		// Every frame in the main is what the rows need; a WAL left
		// untruncated (a reader on the newest snapshot) holds nothing
		// the main lacks. -1 and -1 are not that: the checkpoint never
		// started (another connection held the checkpointer lock).
		if err == nil && (cp.Done || (cp.Frames >= 0 && cp.Backfilled == cp.Frames)) {
			return nil
		}
		if w.onRefused != nil {
			w.onRefused(attempt)
		}
		// The gate's refusal is deliberate and lasts as long as the other
		// writer: asking again within the budget only delays the caller.
		if held := errors.Is(err, ErrCheckpointHeld); held || time.Now().Add(backoff).After(deadline) {
			if err == nil {
				err = fmt.Errorf("%d of %d WAL frames copied into the main (another connection's transaction was in the way)", cp.Backfilled, cp.Frames)
			}
			return fmt.Errorf("close %s: %w after %d attempts over %v: %w; the rows are safe while its -wal is kept (do not delete it): "+
				"checkpoint again once the other connection is done (a replay queued again does it)",
				w.path, ErrCheckpointIncomplete, attempt, w.closeBudget, err)
		}
		time.Sleep(backoff)
		backoff = min(backoff*2, 250*time.Millisecond)
	}
}
