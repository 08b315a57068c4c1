package hermestest

import (
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"testing"
)

// AddUser creates a user for one test, without a home directory (a
// leftover of a crashed run is removed first; removed again at cleanup),
// and returns its uid and gid. It skips the test where users cannot be
// created.
func AddUser(t *testing.T, name string) (uid, gid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create users")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("useradd is not installed")
	}
	exec.Command("userdel", name).Run()
	if out, err := exec.Command("useradd", "-M", "-s", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}
