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
// created. The account's name is name with this test process's pid
// appended (UserName gives it back), so two runs of the same test at once
// (two engineers' full suites) never fight over one account.
func AddUser(t *testing.T, name string) (uid, gid int) {
	name = uniqueUserName(name)
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

// uniqueUserName is name-<pid in base 36>, within useradd's 32 characters.
func uniqueUserName(name string) string {
	sfx := "-" + strconv.FormatInt(int64(os.Getpid()), 36)
	if len(name)+len(sfx) > 32 {
		name = name[:32-len(sfx)]
	}
	return name + sfx
}

// UserName is the account name of uid (the one AddUser made).
func UserName(t *testing.T, uid int) string {
	t.Helper()
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}
