package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
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
	seen := &pidRecords{}
	a := startAgent(t, home, func(o *Options) {
		o.Logger = slog.New(eventCounter{o.Logger.Handler(), &signalled, []string{"holder.frozen", "holder.thawed"}, seen})
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
				t.Fatalf("run %d: the writer was stopped %d times while it closed its own store; the agent logged about pid %d: %s",
					i, st.Stops, c.Pid, seen.waitFor(c.Pid))
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

// eventCounter counts the records whose "event" is one of names, and
// keeps (in pids, when set) the messages of records that name a pid.
type eventCounter struct {
	slog.Handler
	n     *atomic.Int64
	names []string
	pids  *pidRecords
}

func (h eventCounter) Handle(ctx context.Context, r slog.Record) error {
	pid, text := 0, r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "event" && slices.Contains(h.names, a.Value.String()) {
			h.n.Add(1)
		}
		if a.Key == "pid" {
			pid = int(a.Value.Int64())
		}
		text += " " + a.String() // what it stopped, on which evidence
		return true
	})
	if pid != 0 && h.pids != nil {
		h.pids.add(pid, text)
	}
	return h.Handler.Handle(ctx, r)
}

func (h eventCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return eventCounter{h.Handler.WithAttrs(as), h.n, h.names, h.pids}
}

func (h eventCounter) WithGroup(name string) slog.Handler {
	return eventCounter{h.Handler.WithGroup(name), h.n, h.names, h.pids}
}

// pidRecords is what the agent logged about each pid, so a test that saw
// a process stopped can say whether (and how) the agent stopped it.
type pidRecords struct {
	mu  sync.Mutex
	msg map[int][]string
}

func (p *pidRecords) add(pid int, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.msg == nil {
		p.msg = map[int][]string{}
	}
	p.msg[pid] = append(p.msg[pid], msg)
}

// waitFor returns the records about pid, waiting up to 5 s for a first
// one (a freeze logs when the thaw or the confirmation comes, which may
// be after the process was seen stopped); "nothing" means the stop came
// from outside this agent.
func (p *pidRecords) waitFor(pid int) string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		got := slices.Clone(p.msg[pid])
		p.mu.Unlock()
		if len(got) > 0 || time.Now().After(deadline) {
			if len(got) == 0 {
				return "nothing (the stop came from outside this agent?)"
			}
			return strings.Join(got, "; ")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func listIncidents(t *testing.T, a *Agent) []journal.Incident {
	t.Helper()
	incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return incs
}

// A profile directory discovery recorded before its owner changed (made
// by root, then given to the user, as an installer or the attack test
// does) cannot be vouched for until a rescan records it again: reading
// the store's files through it is refused, and what the read returns has
// none of them. The fast freeze judges only a generation it could read:
// it must not stop a writer holding its store's current files because a
// refused read said they are gone (CI on 9cadf57,
// TestAttackCleanCloseAfterStartNeverStopped: setpriv-2-3's directory
// "changed since discovery", its writer stopped twice). The worker that
// read through the old identity is driven directly: the agent's own
// rescan after the refused read replaces it within milliseconds, too
// soon for a writer's events to be sure to land in between.
func TestFastFreezeIgnoresARefusedRead(t *testing.T) {
	home, _ := testHome(t)
	if err := os.Mkdir(filepath.Join(home, "profiles"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, home, nil)
	db := filepath.Join(home, "profiles", "p", "state.db")
	if err := os.Mkdir(filepath.Dir(db), 0o755); err != nil {
		t.Fatal(err)
	}
	wr := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300, Create: true})
	waitHolder(t, a, db, wr.Pid)
	w := a.worker(db)
	if w == nil {
		t.Fatalf("no worker for %s", db)
	}
	if err := os.Chown(filepath.Dir(db), 4242, 4242); err != nil {
		t.Fatal(err)
	}
	gen, err := w.st.ReadGeneration()
	if !errors.Is(err, store.ErrDirChanged) || gen.Main.Exists {
		t.Fatalf("reading the store through the directory discovery recorded: main exists %v, err %v; want none and %v: the test proves nothing", gen.Main.Exists, err, store.ErrDirChanged)
	}
	frozen := map[int]frozenProc{}
	w.fastFreeze(gen, frozen, time.Time{})
	for pid, f := range frozen {
		_ = holders.Thaw(f.ref)
		t.Errorf("the fast freeze stopped pid %d (the writer is %d) on a refused read of the store", pid, wr.Pid)
	}
}
