package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// One home flooded with ten times more empty profile directories than
// max_profiles_per_home cannot keep the agent from starting or another
// home's store from being protected (issue 14, item 7): within the 30 s
// bound the socket answers, the other home's writer is watched and its
// rename-over becomes an incident, and the flood is reported once. The
// bound is a deadline on a poll, not a measure of speed.
//
// The flood is 20,000 directories over a bound of 2,000, not 100,000 over
// the default 10,000: what is checked is that the directories past the
// bound cost the agent nothing but their listing, which the ratio shows
// as well; a home of 100,000 profiles at the default bound is what
// internal/benchscale -n100k measures.
func TestDiscoveryFloodBounded(t *testing.T) {
	const dirs, bound = 20_000, 2_000
	if testing.Short() {
		t.Skip("makes 20,000 directories")
	}
	flood := t.TempDir()
	profiles := filepath.Join(flood, "profiles")
	if err := os.Mkdir(profiles, 0o700); err != nil {
		t.Fatal(err)
	}
	pd, err := unix.Open(profiles, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range dirs { // relative to the directory: no path walk per entry
		if err := unix.Mkdirat(pd, fmt.Sprintf("f%06d", i), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	unix.Close(pd)
	other, db := testHome(t)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 200})

	env := hermestest.NewAgentEnv(t, flood)
	var logs hermestest.LogBuffer
	o := Options{
		StateDir: env.StateDir, Socket: env.Socket, Reconcile: 2 * time.Second,
		Discover: store.DiscoverOptions{Getenv: env.Getenv, UserHome: "/nonexistent", CurrentUserOnly: true, ExtraHomes: []string{other},
			MaxProfiles: bound},
		Policies: incident.PolicySet{Grace: 5 * time.Second},
		Logger:   slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	type started struct {
		a   *Agent
		err error
	}
	done := make(chan started, 1)
	go func() {
		a, err := Start(context.Background(), o)
		done <- started{a, err}
	}()
	var a *Agent
	select {
	case s := <-done:
		if s.err != nil {
			t.Fatal(s.err)
		}
		a = s.a
	case <-time.After(30 * time.Second):
		t.Fatalf("agent not started within 30 s of a home with %d profile directories", dirs)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("agent close: %v", err)
		}
	})
	c, err := net.DialTimeout("unix", a.SocketPath(), 5*time.Second)
	if err != nil {
		t.Fatalf("control socket: %v", err)
	}
	c.Close()
	if n := len(a.allWorkers()); n > 10 {
		t.Errorf("%d workers for %d empty profiles and one store", n, dirs)
	}
	floods := logs.Records(t, EventDiscoveryFlood)
	if len(floods) != 1 {
		t.Fatalf("%d discovery.flood events, want 1", len(floods))
	}
	t.Logf("flood reported: %v", floods[0]["err"])

	waitHolder(t, a, db, w.Pid)
	hermestest.RenameFreshOver(t, db)
	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if inc.State != journal.StateResolved {
		t.Fatalf("the other home's incident ended %s: %s", inc.State, inc.Detail.Error)
	}
	if n := len(logs.Records(t, EventDiscoveryFlood)); n != 1 {
		t.Errorf("the flood was reported %d times after reconciles, want once", n)
	}
}
