package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// A control socket path at which a regular file or a directory sits is
// refused before the agent creates or migrates anything in its state
// directory.
func TestStartRefusesNonSocketBeforeJournal(t *testing.T) {
	home, _ := testHome(t)
	env := hermestest.NewAgentEnv(t, home)
	file := filepath.Join(t.TempDir(), "agent.sock")
	if err := os.WriteFile(file, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, sock := range []string{file, t.TempDir()} {
		stateDir := filepath.Join(t.TempDir(), "state")
		a, err := Start(context.Background(), Options{StateDir: stateDir, Socket: sock, Logger: env.Logger,
			Discover: store.DiscoverOptions{Getenv: env.Getenv, UserHome: "/nonexistent", CurrentUserOnly: true}})
		if err == nil {
			a.Close(context.Background())
			t.Fatalf("agent started with %s as its socket", sock)
		}
		if !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "not a socket") {
			t.Errorf("error %q: want it to name %s and say it is not a socket", err, sock)
		}
		if _, err := os.Lstat(stateDir); !os.IsNotExist(err) {
			t.Errorf("state directory %s exists after the refusal (%v): the journal was created first", stateDir, err)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "not a socket" {
		t.Error("the file at the socket path was changed")
	}
}
