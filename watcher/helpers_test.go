package watcher

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// waitLimit bounds every wait for an event that must come; the race
// detector on 2 cores is slow, so it is generous.
const waitLimit = 10 * time.Second

var storeNames = []string{"state.db", "state.db-wal", "state.db-shm"}

func start(t *testing.T, cfg Config) *Watcher {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := w.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return w
}

func set(t *testing.T, w *Watcher, targets []Target, homes []Home) {
	t.Helper()
	if err := w.Set(targets, homes); err != nil {
		t.Fatalf("set: %v", err)
	}
}

func mkdir(t *testing.T, parts ...string) string {
	t.Helper()
	d := filepath.Join(parts...)
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// renameOver replaces path with a new file the way a restore does.
func renameOver(t testing.TB, path string) {
	t.Helper()
	tmp := path + ".restore-tmp"
	if err := os.WriteFile(tmp, []byte("new generation"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func next(t *testing.T, w *Watcher) Event {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatal("events channel closed")
		}
		return ev
	case <-time.After(waitLimit):
		t.Fatalf("no event within %v", waitLimit)
	}
	panic("unreachable")
}

// waitFor reads events until one matches, failing at the deadline; the
// events skipped on the way are returned too.
func waitFor(t *testing.T, w *Watcher, what string, match func(Event) bool) (Event, []Event) {
	t.Helper()
	var skipped []Event
	deadline := time.After(waitLimit)
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("events closed while waiting for %s (saw %+v)", what, skipped)
			}
			if match(ev) {
				return ev, skipped
			}
			skipped = append(skipped, ev)
		case <-deadline:
			t.Fatalf("no %s within %v (saw %+v)", what, waitLimit, skipped)
		}
	}
}

// quiet asserts that no event arrives for d: a bounded wait whose only
// purpose is to show absence.
func quiet(t *testing.T, w *Watcher, d time.Duration) {
	t.Helper()
	select {
	case ev := <-w.Events():
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(d):
	}
}

// sentinel is a target in its own directory whose changes mark a point in
// the event stream: events come out of one loop in the order their raw
// events were read, so whatever the sentinel's event follows would have
// been delivered before it.
type sentinel struct {
	Target
	path string
}

func newSentinel(t *testing.T) *sentinel {
	d := mkdir(t, t.TempDir(), "sentinel")
	return &sentinel{Target{Key: "sentinel", Dir: d, Names: []string{"mark"}}, filepath.Join(d, "mark")}
}

// expectNext changes the sentinel and requires its event to be the next
// one, proving nothing else was emitted before it.
func (s *sentinel) expectNext(t *testing.T, w *Watcher) {
	t.Helper()
	t0 := time.Now()
	renameOver(t, s.path)
	for {
		ev := next(t, w)
		if ev.Key == s.Key && ev.At.Before(t0) {
			continue // the trailing half of an earlier mark
		}
		if ev.Kind != StoreChanged || ev.Key != s.Key {
			t.Fatalf("got %+v before the sentinel's event", ev)
		}
		return
	}
}

func waitCounter(t *testing.T, what string, get func() int64, min int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for get() < min {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d after 30s, want >= %d", what, get(), min)
		}
		time.Sleep(5 * time.Millisecond) // polling a counter, not synchronising
	}
}

func watching(w *Watcher, dir string) bool {
	return slices.Contains(w.fsw.WatchList(), dir)
}

func storeEvent(key string, op Op, name string) func(Event) bool {
	return func(ev Event) bool {
		return ev.Kind == StoreChanged && ev.Key == key && ev.Ops.Has(op) && (name == "" || slices.Contains(ev.Names, name))
	}
}

func homeEvent(root string, op Op, name string) func(Event) bool {
	return func(ev Event) bool {
		return ev.Kind == HomeChanged && ev.Home == root && ev.Ops.Has(op) && (name == "" || slices.Contains(ev.Names, name))
	}
}

// waitAll reads events until each of want has matched one, in any order:
// a leading event for one key can overtake the trailing event of another.
func waitAll(t *testing.T, w *Watcher, want map[string]func(Event) bool) {
	t.Helper()
	var seen []Event
	deadline := time.After(waitLimit)
	for len(want) > 0 {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("events closed (saw %+v)", seen)
			}
			seen = append(seen, ev)
			for what, match := range want {
				if match(ev) {
					delete(want, what)
				}
			}
		case <-deadline:
			t.Fatalf("still waiting for %v after %v (saw %+v)", slices.Collect(maps.Keys(want)), waitLimit, seen)
		}
	}
}
