package supervisor

import (
	"context"
	"database/sql"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// The multi-user attack tests of issue 14 (rows 1-4): real users, a real
// root agent, real writers, the attack done as the attacking user.

type attackUser struct {
	name     string
	uid, gid int
	home     string // <tmp>/<name>, 0700, the user's
	hermes   string // home/.hermes
}

// newAttackUser creates a user for one test (a leftover of a crashed run
// is removed first; removed again at cleanup) with a Hermes home holding
// one named profile "work".
func newAttackUser(t *testing.T, base, name string) attackUser {
	t.Helper()
	uid, gid := hermestest.AddUser(t, name)
	au := attackUser{name: name, uid: uid, gid: gid, home: filepath.Join(base, name)}
	au.hermes = filepath.Join(au.home, ".hermes")
	if err := os.MkdirAll(filepath.Join(au.hermes, "profiles", "work"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := hermestest.CreateStore(au.store()); err != nil {
		t.Fatal(err)
	}
	chownTree(t, au.home, uid, gid)
	return au
}

// store is the user's "work" profile store.
func (u attackUser) store() string { return filepath.Join(u.hermes, "profiles", "work", "state.db") }

// as runs a shell command as the user: the attack is theirs, with their
// rights only.
func (u attackUser) as(t *testing.T, script string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid)}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as %s: %s: %v\n%s", u.name, script, err, out)
	}
}

// attackBase is a temp dir everyone can traverse, as /home is.
func attackBase(t *testing.T) string {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return base
}

func chownTree(t *testing.T, root string, uid, gid int) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// startMultiUserAgent is a root agent watching exactly these homes.
func startMultiUserAgent(t *testing.T, mod func(*Options), homes ...string) *Agent {
	t.Helper()
	return startAgent(t, homes[0], func(o *Options) {
		o.Discover = store.DiscoverOptions{Getenv: func(string) string { return "" }, UserHome: "/nonexistent",
			CurrentUserOnly: true, ExtraHomes: homes}
		if mod != nil {
			mod(o)
		}
	})
}

// treeState is every entry under a directory with its size and mtime.
type treeState map[string]string

func snapshotTree(t *testing.T, root string) treeState {
	t.Helper()
	ts := treeState{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		ts[p] = fi.Mode().String()
		return nil
	})
	return ts
}

// checkNothingNew fails if root has an entry that before did not have,
// other than the store's own files (the victim's writer goes on writing
// state.db, -wal and -shm, which exist before).
func checkNothingNew(t *testing.T, root string, before treeState) {
	t.Helper()
	for p := range snapshotTree(t, root) {
		if _, ok := before[p]; !ok {
			t.Errorf("written outside the attacker's directories: %s", p)
		}
	}
}

// rowsOfSession counts a session's messages, and any message whose
// content carries marker.
func rowsOfSession(t *testing.T, db, session, marker string) (n, marked int) {
	t.Helper()
	c, err := sql.Open("sqlite", "file:"+db+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.QueryRowContext(ctx, "SELECT count(*) FROM messages WHERE session_id = ?", session).Scan(&n); err != nil && !strings.Contains(err.Error(), "no such table") {
		t.Fatalf("count rows of %s in %s: %v", session, db, err)
	}
	if marker != "" {
		if err := c.QueryRowContext(ctx, "SELECT count(*) FROM messages WHERE instr(content, ?) > 0", marker).Scan(&marked); err != nil {
			t.Fatalf("search %s: %v", db, err)
		}
	}
	return n, marked
}
