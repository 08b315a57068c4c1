package supervisor

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/internal/sdnotify"
	"github.com/stateguard/stateguard/journal"
)

// handBack is what a service manager passes the next start: a copy of
// every fd its store keeps, with its name.
func handBack(t *testing.T, s *sdnotify.FDStore) []sdnotify.ListenedFD {
	t.Helper()
	files, _, err := s.Files()
	if err != nil {
		t.Fatal(err)
	}
	var out []sdnotify.ListenedFD
	for _, f := range files {
		out = append(out, sdnotify.ListenedFD{Name: f.Name(), File: f})
	}
	return out
}

// fdStore is a service manager's fd store for one test, and a notifier
// that sends to it.
func fdStore(t *testing.T) (*sdnotify.FDStore, *sdnotify.Notifier) {
	t.Helper()
	fds, err := sdnotify.ListenFDStore(filepath.Join(t.TempDir(), "notify.sock"), 1024)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fds.Close() })
	n, err := sdnotify.New(fds.Addr)
	if err != nil {
		t.Fatal(err)
	}
	return fds, n
}

// waitNames polls the store until ok accepts its names.
func waitNames(t *testing.T, s *sdnotify.FDStore, d time.Duration, ok func([]string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		n := s.Names()
		if ok(n) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("fd store names %v after %v", n, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Seed 2's lost rows: a -wal unlinked from a store nobody has open is held
// by the agent's guard alone, and the agent stopped before the capture
// (there: a full disk, then kill -9). Copies of the pins in the service
// manager's fd store keep the inode alive; the next agent takes them back
// and the incident resolves with every row, and leaves nothing in the
// store.
func TestKeptPinsCarryAnUnlinkedIdleWALAcrossAnAgentStop(t *testing.T) {
	fds, n := fdStore(t)
	home, db := testHome(t)
	reached, proceed := make(chan struct{}), make(chan struct{})
	var once, release sync.Once
	letGo := func() { release.Do(func() { close(proceed) }) }
	t.Cleanup(letGo)
	hooks := incident.Hooks{BeforeStep: func(_ string, s journal.State) {
		if s == journal.StateReleased {
			once.Do(func() { close(reached); <-proceed })
		}
	}}
	var opts Options
	a := startAgent(t, home, func(o *Options) {
		o.Guard, o.Reconcile, o.Hooks = true, time.Hour, hooks
		o.Keeper = NewPinKeeper(n, nil, nil)
		opts = *o
	})
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 60, Rate: 300, CheckpointEvery: -1})
	waitGuard(t, a, db, control.GuardArmed, 10*time.Second)
	waitExit(t, w, 20*time.Second)
	acks := w.Acks(t)
	if miss := missingAcks(acks, mainOnlyRows(t, db)); len(miss) == 0 {
		t.Fatal("every row already in the main file: the test cannot tell the unlinked -wal is recovered")
	}
	removeSidecars(t, db)
	closeAtHeldStep(t, a, reached, letGo, "the capture step")
	inc := onlyIncident(t, opts.StateDir, db)
	if inc.Kind != journal.KindSidecarLost || inc.State != journal.StateReleased || len(inc.Detail.Holders) != 0 {
		t.Fatalf("stopped before the capture: incident %s %s holders %+v", inc.Kind, inc.State, inc.Detail.Holders)
	}
	waitNames(t, fds, 5*time.Second, func(ns []string) bool { return slices.Contains(ns, "pin."+inc.ID+".wal") })

	opts.Hooks = incident.Hooks{}
	opts.Keeper = NewPinKeeper(n, handBack(t, fds), nil)
	a2, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a2.Close(context.Background()) })
	got := waitIncident(t, a2, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if got.ID != inc.ID || got.State != journal.StateResolved {
		t.Fatalf("after the restart: incident %s %s (%s)", got.ID, got.State, got.Detail.Error)
	}
	if miss := missingAcks(acks, captureRows(t, got.Detail.CapturePath)); len(miss) > 0 {
		t.Fatalf("%d acknowledged rows missing from the capture", len(miss))
	}
	checkExactlyOnce(t, acks, dbRows(t, db), time.Time{}, time.Time{})
	waitNames(t, fds, 5*time.Second, func(ns []string) bool {
		return !slices.ContainsFunc(ns, func(s string) bool { return strings.HasPrefix(s, "pin.") })
	})
}

// A resumed incident whose writer still lives (held, stopped) pins the
// writer's files as the first agent did, with the pin locks that keep the
// orphan from becoming the last closer, rather than adopting the kept
// copies, which carry no lock.
func TestResumePinsALiveHolderWithItsLocksBeforeTheKeptCopies(t *testing.T) {
	fds, n := fdStore(t)
	home, db := testHome(t)
	var opts Options
	a := startAgent(t, home, func(o *Options) {
		o.Policies.Replaced = incident.PolicyHold
		o.Keeper = NewPinKeeper(n, nil, nil)
		opts = *o
	})
	w := startHeldWriter(t, a, db)
	w.AcksGrow(t, 10)
	hermestest.RestoreOver(t, db)
	inc := waitIncident(t, a, db, 10*time.Second, journal.StatePinned)
	var orphan fileid.ID
	for _, h := range inc.Detail.Holders {
		for _, f := range h.Files {
			if f.Role == string(holders.RoleMain) {
				orphan = f.ID
			}
		}
	}
	if orphan == (fileid.ID{}) {
		t.Fatalf("no orphan main among the journaled holder files: %+v", inc.Detail.Holders)
	}
	if len(ofdLocks(t, orphan)) == 0 {
		t.Fatal("the first agent holds no pin lock on the orphan main: nothing to compare")
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitNames(t, fds, 5*time.Second, func(ns []string) bool { return slices.Contains(ns, "pin."+inc.ID+".main") })
	if l := ofdLocks(t, orphan); len(l) != 0 {
		t.Fatalf("locks on the orphan main with no agent running: %+v", l)
	}
	if hermestest.StateOf(w.Pid) != 'T' {
		t.Fatal("the held writer is not stopped across the agent's stop")
	}

	opts.Keeper = NewPinKeeper(n, handBack(t, fds), nil)
	a2, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a2.Close(context.Background()) })
	if l := ofdLocks(t, orphan); len(l) != 1 || l[0] != (ofdLock{"READ", "1073741826", "1073742335"}) {
		t.Fatalf("the resumed incident's lock on the orphan main: %+v, want the SHARED range", l)
	}
}

// fdStoreEnv makes the test binary a service manager's fd store on the
// socket it names, until its stdin closes: the process that holds the
// agent's pin copies, as systemd does.
const fdStoreEnv = "STATEGUARD_TEST_FDSTORE"

func fdStoreMain(sock string) int {
	s, err := sdnotify.ListenFDStore(sock, 1024)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer s.Close()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// managerKeeper is a PinKeeper whose copies another process keeps (the
// test binary as fdStoreMain): the agent's scans see that process hold
// them, as they see systemd.
func managerKeeper(t *testing.T) *PinKeeper {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "notify.sock")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fdStoreEnv+"="+sock)
	_, out := hermestest.StartPiped(t, cmd)
	if l := hermestest.FirstLine(t, "the fd store", out, 30*time.Second); l != "ready" {
		t.Fatalf("fd store said %q", l)
	}
	n, err := sdnotify.New(sock)
	if err != nil {
		t.Fatal(err)
	}
	k := NewPinKeeper(n, nil, nil)
	k.manager = cmd.Process.Pid
	return k
}

// The copies of a rewritten store's pins are copies of its current -wal
// and -shm, which the quarantine moves aside once no new opener holds
// them. Held by the service manager, they are no opener: before the
// agent told its scans so (holders.Options.Kept), chaos seed 2's first
// cp over the main waited for the manager the whole 10 s, left the old
// sidecars in place, and the store was malformed.
func TestKeptPinsAreNoHolderOfTheManager(t *testing.T) {
	needFanotify(t)
	for _, tc := range []struct {
		name, script string
		kind         journal.Kind
	}{
		{"cp", "cp backup.db state.db", journal.KindRewritten},
		{"mv aside, then cp", "mv state.db state.db.old && cp backup.db state.db", journal.KindMispaired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := managerKeeper(t)
			// The manager already keeps a copy of the live main (an
			// earlier incident's, say) when the tool runs: a full scan
			// has seen it, so every targeted scan of the store looks at
			// the manager again.
			earlier := func(a *Agent, db string, _ *hermestest.Writer, run func()) {
				f, err := os.Open(db)
				if err != nil {
					t.Fatal(err)
				}
				k.Keep(db, "20261207T000000Z-000000", holders.RoleMain, f)
				f.Close() // the test's SQLite connections use OFD locks
				a.fullScan()
				run()
			}
			inc := toolScenarioWith(t, tc.script, tc.kind, hostWriter, hermestest.WriterOptions{},
				func(o *Options) { guardOn(o); o.Keeper = k }, earlier)
			wantConfirmed(t, inc)
			if strings.Contains(inc.Detail.Error, "joined") {
				t.Fatalf("incident note: %s", inc.Detail.Error)
			}
		})
	}
}
