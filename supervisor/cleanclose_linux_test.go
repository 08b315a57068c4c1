package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// A process that creates its own WAL store, is seen by the agent as its
// holder, and then closes it cleanly (SQLite's last closer checkpoints,
// unlinks -shm and -wal) is never stopped, not even for an instant: the
// test is its parent and waits for it with WUNTRACED, so a SIGSTOP that a
// SIGCONT undoes a moment later still fails it. The guard is off (the
// Options default), so every close really unlinks the sidecars, as it does
// for a store created before the agent could arm its guard.
func TestCleanCloseIsNeverStopped(t *testing.T) {
	home, _ := testHome(t)
	if err := os.Mkdir(filepath.Join(home, "profiles"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A stop undone by a SIGCONT before the parent waits can escape
	// WUNTRACED; the agent's own freeze and thaw events cannot.
	var signalled atomic.Int64
	a := startAgent(t, home, func(o *Options) {
		o.Logger = slog.New(eventCounter{o.Logger.Handler(), &signalled, []string{"holder.frozen", "holder.thawed"}})
	})
	bin, err := hermestest.WriterBinary()
	if err != nil {
		t.Fatal(err)
	}
	const runs = 100
	for i := range runs {
		db := filepath.Join(home, "profiles", fmt.Sprintf("p%d", i), "state.db")
		if err := os.Mkdir(filepath.Dir(db), 0o700); err != nil {
			t.Fatal(err)
		}
		c := hermestest.SpawnWatched(t, nil, bin, "-db", db, "-create", "-count", "1", "-linger", "-checkpoint-every", "0")
		waitHolder(t, a, db, c.Pid)
		if err := unix.Kill(c.Pid, unix.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case st := <-c.Exited:
			if st.Stops > 0 {
				t.Fatalf("run %d: the writer was stopped %d times while it closed its own store", i, st.Stops)
			}
			if st.Code != 0 {
				t.Fatalf("run %d: writer exited with status %d", i, st.Code)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("run %d: writer %d did not exit", i, c.Pid)
		}
		for _, sfx := range []string{"-wal", "-shm"} {
			if _, err := os.Lstat(db + sfx); err == nil {
				t.Fatalf("run %d: %s%s still there: the close was not SQLite's last close, the test proves nothing", i, db, sfx)
			}
		}
	}
	if n := signalled.Load(); n > 0 {
		t.Fatalf("the agent froze or thawed a clean closer %d times (holder.frozen/holder.thawed)", n)
	}
	if incs := listIncidents(t, a); len(incs) > 0 {
		t.Fatalf("clean closes opened %d incidents, first %s kind %s", len(incs), incs[0].ID, incs[0].Kind)
	}
}

// eventCounter counts the records whose "event" is one of names.
type eventCounter struct {
	slog.Handler
	n     *atomic.Int64
	names []string
}

func (h eventCounter) Handle(ctx context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "event" && slices.Contains(h.names, a.Value.String()) {
			h.n.Add(1)
		}
		return true
	})
	return h.Handler.Handle(ctx, r)
}

func (h eventCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return eventCounter{h.Handler.WithAttrs(as), h.n, h.names}
}

func (h eventCounter) WithGroup(name string) slog.Handler {
	return eventCounter{h.Handler.WithGroup(name), h.n, h.names}
}

func listIncidents(t *testing.T, a *Agent) []journal.Incident {
	t.Helper()
	incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return incs
}
