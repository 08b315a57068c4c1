package holders

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/fileid"
)

func TestParseLockLine(t *testing.T) {
	cases := []struct {
		line string
		ok   bool
		want lockEntry
	}{
		{"1: POSIX  ADVISORY  READ 10662 fe:00:10023009 1073741826 1073742335", true,
			lockEntry{class: "POSIX", pid: 10662, id: fileid.ID{Dev: linuxMkdev(0xfe, 0), Ino: 10023009}, start: 1073741826, end: 1073742335}},
		{"4: OFDLCK ADVISORY  WRITE -1 08:01:1234 128 128", true,
			lockEntry{class: "OFDLCK", write: true, pid: -1, id: fileid.ID{Dev: linuxMkdev(8, 1), Ino: 1234}, start: 128, end: 128}},
		{"3: FLOCK  ADVISORY  READ 12109 103:1a2:9978476 0 EOF", true,
			lockEntry{class: "FLOCK", pid: 12109, id: fileid.ID{Dev: linuxMkdev(0x103, 0x1a2), Ino: 9978476}, end: math.MaxUint64}},
		{"7: -> POSIX  ADVISORY  WRITE 99 fe:00:5 120 120", true,
			lockEntry{class: "POSIX", write: true, pid: 99, id: fileid.ID{Dev: linuxMkdev(0xfe, 0), Ino: 5}, start: 120, end: 120, waiter: true}},
		{"2: LEASE  ACTIVE    READ 77 00:2c:41 0 EOF", true,
			lockEntry{class: "LEASE", pid: 77, id: fileid.ID{Dev: linuxMkdev(0, 0x2c), Ino: 41}, end: math.MaxUint64}},
		{"", false, lockEntry{}},
		{"1: POSIX ADVISORY READ x fe:00:1 0 1", false, lockEntry{}},
		{"1: POSIX ADVISORY READ 1 fe:00 0 1", false, lockEntry{}},
		{"POSIX ADVISORY READ 1 fe:00:1 0 1", false, lockEntry{}},
	}
	for _, c := range cases {
		got, ok := parseLockLine([]byte(c.line))
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("%q: %+v %v, want %+v %v", c.line, got, ok, c.want, c.ok)
		}
	}
	main, _ := parseLockLine([]byte(cases[0].line))
	shm, _ := parseLockLine([]byte(cases[1].line))
	if !main.sqliteMain() || shm.sqliteMain() || main.fileOwned() || !shm.fileOwned() {
		t.Error("lock classes")
	}
}

// linuxMkdev must be Linux's stat(2) encoding (glibc's makedev).
func TestLinuxMkdev(t *testing.T) {
	for _, c := range []struct{ major, minor, want uint64 }{
		{0xfe, 0, 0xfe00}, {8, 1, 0x801}, {0, 0x2c, 0x2c}, {0x103, 0x1a2, 0x1a2&0xff | 0x103<<8 | 0x100<<12},
		{0x1234, 0, 0x234<<8 | 0x1000<<32},
	} {
		if got := linuxMkdev(c.major, c.minor); got != c.want {
			t.Errorf("mkdev(%#x, %#x) = %#x, want %#x", c.major, c.minor, got, c.want)
		}
	}
}

func TestParseFDInfo(t *testing.T) {
	b := "pos:\t0\nflags:\t02500002\nmnt_id:\t27\nino:\t10023009\n" +
		"lock:\t1: POSIX  ADVISORY  READ 10662 fe:00:10023009 1073741826 1073742335\n" +
		"lock:\t2: OFDLCK ADVISORY  READ -1 fe:00:10023009 128 128\n"
	flags, mnt, locks, err := parseFDInfo([]byte(b))
	if err != nil || flags != 0o2500002 || mnt != 27 || len(locks) != 2 || !openForWrite(flags) {
		t.Fatalf("flags %o mnt %d locks %+v err %v", flags, mnt, locks, err)
	}
	if locks[1].class != "OFDLCK" || locks[1].pid != -1 {
		t.Errorf("lock %+v", locks[1])
	}
	for flags, w := range map[uint64]bool{0o2500000: false, 0o100001: true, 0o2: true, 0o3: false} {
		if openForWrite(flags) != w {
			t.Errorf("openForWrite(%o) != %v", flags, w)
		}
	}
	if _, _, _, err := parseFDInfo([]byte("pos:\t0\n")); err == nil {
		t.Error("fdinfo without flags parsed")
	}
}

func TestParseMountinfo(t *testing.T) {
	mi := "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n" +
		"36 27 0:45 /home/u/.hermes /mnt/with\\040space rw - ext4 /dev/vda rw\n" +
		"garbage\n"
	ms := parseMountinfo([]byte(mi))
	want := []mountEntry{
		{ID: 27, Dev: linuxMkdev(254, 0), Root: "/", Point: "/", FSType: "ext4", SuperOptions: "rw"},
		{ID: 36, Dev: linuxMkdev(0, 45), Root: "/home/u/.hermes", Point: "/mnt/with space", FSType: "ext4", SuperOptions: "rw"},
	}
	if !slices.Equal(ms, want) {
		t.Fatalf("%+v, want %+v", ms, want)
	}
}

func TestHostPathOf(t *testing.T) {
	dev := linuxMkdev(254, 0)
	ours := []mountEntry{
		{ID: 1, Dev: dev, Root: "/", Point: "/"},
		{ID: 2, Dev: dev, Root: "/srv", Point: "/mnt/srv"}, // a bind mount on the host
		{ID: 3, Dev: linuxMkdev(0, 9), Root: "/", Point: "/tmp"},
	}
	vol := mountEntry{ID: 40, Dev: dev, Root: "/home/u/.hermes", Point: "/data"}
	cases := []struct {
		holder string
		m      mountEntry
		prefer func(string) bool
		want   string
	}{
		{"/data/state.db", vol, nil, "/home/u/.hermes/state.db"},
		{"/data", vol, nil, "/home/u/.hermes"},
		{"/elsewhere/state.db", vol, nil, ""},
		{"/srv/h/state.db", mountEntry{ID: 41, Dev: dev, Root: "/", Point: "/"}, nil, "/mnt/srv/h/state.db"},
		{"/srv/h/state.db", mountEntry{ID: 41, Dev: dev, Root: "/", Point: "/"}, func(p string) bool { return p == "/srv/h/state.db" }, "/srv/h/state.db"},
		{"/x", mountEntry{ID: 42, Dev: linuxMkdev(9, 9), Root: "/", Point: "/"}, nil, ""},
	}
	for _, c := range cases {
		if got := hostPathOf(c.holder, c.m, ours, c.prefer); got != c.want {
			t.Errorf("%s via %+v: %q, want %q", c.holder, c.m, got, c.want)
		}
	}
}

func TestParseNSPid(t *testing.T) {
	for status, want := range map[string]int{
		"Name:\tw\nNSpid:\t4242\t1\n": 1,
		"Name:\tw\nNSpid:\t4242\n":    0,
		"Name:\tw\n":                  0,
	} {
		if got := parseNSPid([]byte(status)); got != want {
			t.Errorf("%q: %d, want %d", status, got, want)
		}
	}
}

func TestParseProcStatKthread(t *testing.T) {
	kthread := "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 7 0 0 18446744073709551615"
	user := "4242 (writer) S 1 4242 4242 0 -1 4194560 120 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615"
	k, err1 := parseProcStat([]byte(kthread))
	u, err2 := parseProcStat([]byte(user))
	if err1 != nil || err2 != nil || !k.Kthread() || u.Kthread() || k.Flags != 2129984 {
		t.Fatalf("kthread %+v (%v), user %+v (%v)", k, err1, u, err2)
	}
}

func TestMapsSharedWrite(t *testing.T) {
	for perms, want := range map[string]bool{"rw-s": true, "r--s": false, "rw-p": false, "r-xp": false} {
		e, ok := parseMapsLine([]byte("7f00-7f08 " + perms + " 00000000 fe:00 42 /d/state.db-shm"))
		if !ok || e.SharedWrite() != want {
			t.Errorf("%s: ok %v shared-write %v", perms, ok, e.SharedWrite())
		}
	}
}

// The table's file-owned locks are accounted one per open file
// description the fdinfo shows them through; leftovers are unexplained.
func TestUnattributed(t *testing.T) {
	id := fileid.ID{Dev: 1, Ino: 30}
	ofd := lockEntry{class: "OFDLCK", pid: -1, id: id, start: 128, end: 128}
	t3 := &lockTable{on: map[fileid.ID][]lockEntry{id: {ofd, ofd, {class: "POSIX", pid: 5, id: id, start: 128, end: 128}}}}
	sameOFD := func(a, b fdLock) bool { return a.pid == b.pid } // one description per process here
	cases := []struct {
		name string
		seen []fdLock
		want int
	}{
		{"none seen", nil, 2},
		{"one process, two fds of one description", []fdLock{{pid: 7, fd: 3, lock: ofd}, {pid: 7, fd: 4, lock: ofd}}, 1},
		{"two processes", []fdLock{{pid: 7, fd: 3, lock: ofd}, {pid: 8, fd: 3, lock: ofd}}, 0},
		{"another range", []fdLock{{pid: 7, fd: 3, lock: lockEntry{class: "OFDLCK", id: id, start: 0, end: 0}}}, 2},
	}
	for _, c := range cases {
		if got := t3.unattributed(c.seen, sameOFD)[id]; got != c.want {
			t.Errorf("%s: %d unexplained, want %d", c.name, got, c.want)
		}
	}
}

func TestParseRule(t *testing.T) {
	for in, want := range map[string]Rule{"": RuleLocks, "locks": RuleLocks, "strict": RuleStrict} {
		if r, err := ParseRule(in); err != nil || r != want {
			t.Errorf("%q: %q %v", in, r, err)
		}
	}
	if _, err := ParseRule("lenient"); err == nil || !strings.Contains(err.Error(), "locks") {
		t.Errorf("lenient: %v", err)
	}
}

// judge: only other users' processes are cleared, only by the locks rule,
// and only when the lock table can vouch for them.
func TestJudge(t *testing.T) {
	other := Blind{Pid: 40, UID: 0, Scope: ScopeOtherUser}
	own := Blind{Pid: 41, UID: 1000, Scope: ScopeOwnUser}
	gap := Blind{UID: -1, Scope: ScopeScan, Reason: "cannot stat"}
	cases := []struct {
		name        string
		rule        Rule
		locks       *lockTable
		could       []Blind
		unexplained []string
		blind       int
		cleared     int
		note        bool
	}{
		{"locks clears other users", RuleLocks, &lockTable{}, []Blind{other}, nil, 0, 1, false},
		{"strict keeps them", RuleStrict, &lockTable{}, []Blind{other}, nil, 1, 0, false},
		{"own user counts", RuleLocks, &lockTable{}, []Blind{other, own}, nil, 1, 1, false},
		{"scan gaps count", RuleLocks, &lockTable{}, []Blind{gap}, nil, 1, 0, false},
		{"unattributed lock", RuleLocks, &lockTable{}, []Blind{other}, []string{"1 OFD lock"}, 2, 0, true},
		{"no lock table", RuleLocks, nil, []Blind{other}, nil, 1, 0, true},
		{"unreadable lock table", RuleLocks, &lockTable{err: errTest}, []Blind{other}, nil, 1, 0, true},
	}
	for _, c := range cases {
		col := &collector{locks: c.locks, euid: 1000}
		s := StoreResult{Rule: c.rule}
		col.judge(&s, c.could, c.unexplained)
		if len(s.Blind) != c.blind || s.Uninspected.Count != c.cleared || (s.RuleNote != "") != c.note {
			t.Errorf("%s: blind %+v cleared %+v note %q", c.name, s.Blind, s.Uninspected, s.RuleNote)
		}
	}
	u := summarize([]Blind{other, {Pid: 42, UID: 7}}, 1000)
	if u.Summary != "2 processes of other users not inspected; none holds a lock on this store" || !slices.Equal(u.UIDs, []int{0, 7}) {
		t.Errorf("summary %+v", u)
	}
	if u := summarize([]Blind{other}, 0); u.Summary != "1 process not inspectable even by root; none holds a lock on this store" {
		t.Errorf("root summary %q", u.Summary)
	}
}

type testError string

func (e testError) Error() string { return string(e) }

const errTest = testError("no /proc/locks")

// Access by the rule: a writable fd on main or -wal, or a shared writable
// mapping; a writable -shm fd alone is not writing the generation; lock
// evidence alone is unknown.
func TestProcessAccess(t *testing.T) {
	cases := []struct {
		files []Held
		want  Access
	}{
		{[]Held{{Role: RoleMain, FDWrite: true, Access: AccessWrite}}, AccessWrite},
		{[]Held{{Role: RoleWAL, FDWrite: true, Access: AccessWrite}}, AccessWrite},
		{[]Held{{Role: RoleSHM, MapWrite: true, Access: AccessWrite}}, AccessWrite},
		{[]Held{{Role: RoleSHM, FDWrite: true, Access: AccessWrite}}, AccessRead},
		{[]Held{{Role: RoleMain, Access: AccessRead}, {Role: RoleSHM, Access: AccessUnknown}}, AccessUnknown},
		{[]Held{{Role: RoleMain, Access: AccessRead}}, AccessRead},
	}
	for i, c := range cases {
		p := Process{Files: c.files}
		if got := p.access(); got != c.want {
			t.Errorf("case %d: %s, want %s", i, got, c.want)
		}
	}
}
