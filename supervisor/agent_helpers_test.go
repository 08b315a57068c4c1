package supervisor

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// testHome makes a Hermes home with a default store.
func testHome(t testing.TB) (home, db string) {
	t.Helper()
	home = t.TempDir()
	db = filepath.Join(home, "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	return home, db
}

func startAgent(t testing.TB, home string, mod func(*Options)) *Agent {
	t.Helper()
	env := hermestest.NewAgentEnv(t, home)
	o := Options{
		StateDir:  env.StateDir,
		Socket:    env.Socket,
		Reconcile: 500 * time.Millisecond,
		Discover:  store.DiscoverOptions{Getenv: env.Getenv, UserHome: "/nonexistent", CurrentUserOnly: true},
		Policies:  incident.PolicySet{Grace: 5 * time.Second},
		Logger:    env.Logger,
	}
	if mod != nil {
		mod(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("agent close: %v", err)
		}
	})
	return a
}

// waitHolder waits until the agent's holder cache knows pid as a holder
// of every role of db.
// startHeldWriter starts a writer on db and waits until a sees it hold
// the store.
func startHeldWriter(t testing.TB, a *Agent, db string) *hermestest.Writer {
	t.Helper()
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300})
	waitHolder(t, a, db, w.Pid)
	return w
}

func waitHolder(t testing.TB, a *Agent, db string, pid int) {
	t.Helper()
	hermestest.Eventually(t, "the agent to see the writer as a holder", 20*time.Second, func() bool {
		a.fullScan()
		sr, ok := a.cache.Known(holders.Target{Path: db})
		if !ok {
			return false
		}
		p := findPid(sr.Holders, pid)
		return p != nil && len(p.Files) >= 3
	})
}

// waitIncident waits for the store's first incident to reach a state.
func waitIncident(t testing.TB, a *Agent, db string, d time.Duration, want ...journal.State) journal.Incident {
	t.Helper()
	var inc journal.Incident
	hermestest.Eventually(t, "an incident in state "+states(want), d, func() bool {
		incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{Store: db})
		if err != nil || len(incs) == 0 {
			return false
		}
		inc = incs[0]
		for _, s := range want {
			if inc.State == s {
				return true
			}
		}
		return false
	})
	return inc
}

func states(ss []journal.State) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return strings.Join(out, "|")
}

// captureRows opens a private copy of a capture and returns the contents
// of its messages.
func captureRows(t *testing.T, dir string) map[string]int {
	t.Helper()
	if _, err := recovery.OpenCapture(dir); err != nil {
		t.Fatalf("capture %s: %v", dir, err)
	}
	copyPath, err := recovery.PrivateCopy(context.Background(), dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dbRows(t, copyPath)
}

// dbRows returns content → count of every message in a store, after an
// integrity check.
func dbRows(t *testing.T, path string) map[string]int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ic string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&ic); err != nil || ic != "ok" {
		t.Fatalf("integrity_check of %s: %q %v", path, ic, err)
	}
	rows, err := db.Query("SELECT content FROM messages WHERE content IS NOT NULL")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		out[c]++
	}
	return out
}

// missingAcks lists acknowledged messages not in rows.
func missingAcks(acks []hermestest.Ack, rows map[string]int) []int64 {
	var miss []int64
	for _, a := range acks {
		if rows[hermestest.MessageContent(a.Session, a.Seq)] == 0 {
			miss = append(miss, a.Seq)
		}
	}
	return miss
}

func waitExit(t testing.TB, w *hermestest.Writer, d time.Duration) {
	t.Helper()
	select {
	case <-w.Done():
	case <-time.After(d):
		t.Fatalf("writer %d still running after %v", w.Pid, d)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// checkExactlyOnce fails unless every ack stamped after cut is in rows
// exactly once, and no ack stamped before rolledBack is (a restore rolled
// those back on purpose); zero times skip either check.
func checkExactlyOnce(t *testing.T, acks []hermestest.Ack, rows map[string]int, cut, rolledBack time.Time) {
	t.Helper()
	var lost, dup, readded []int64
	for _, a := range acks {
		n := rows[hermestest.MessageContent(a.Session, a.Seq)]
		ts := time.Unix(0, int64(a.Timestamp*1e9))
		switch {
		case ts.After(cut) && n == 0:
			lost = append(lost, a.Seq)
		case ts.After(cut) && n > 1:
			dup = append(dup, a.Seq)
		case !rolledBack.IsZero() && ts.Before(rolledBack) && n > 0:
			readded = append(readded, a.Seq)
		}
	}
	if len(lost)+len(dup)+len(readded) > 0 {
		t.Fatalf("of %d acks: lost %v, duplicated %v, rolled-back rows re-added %v", len(acks), lost, dup, readded)
	}
}

// closeAtHeldStep stops the agent while an incident step is held: it
// waits until the step's hook says reached, begins Close (which waits for
// the step), lets the step go on with letGo and waits for Close. The
// journal then says where a stopped agent left the incident.
func closeAtHeldStep(t *testing.T, a *Agent, reached <-chan struct{}, letGo func(), step string) {
	t.Helper()
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatalf("the incident never reached %s", step)
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close(context.Background()) }()
	<-a.quit // Close has begun, and waits for the step
	letGo()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
