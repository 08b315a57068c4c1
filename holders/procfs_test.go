package holders

import (
	"slices"
	"testing"
)

func TestParseProcStat(t *testing.T) {
	// The command name may hold spaces and ')'; fields count from the last ')'.
	line := "4242 (we ird) (name) S 1 4242 4242 0 -1 4194560 120 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615\n"
	st, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.State != 'S' || st.StartTicks != 987654 {
		t.Fatalf("got %+v", st)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) SS 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20", "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x 20"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

func TestParseMapsLine(t *testing.T) {
	cases := []struct {
		line string
		ok   bool
		want mapsEntry
	}{
		{"7f2c1a000000-7f2c1a008000 rw-s 00000000 fd:01 1835044                    /tmp/x/state.db-shm (deleted)", true,
			mapsEntry{Range: []byte("7f2c1a000000-7f2c1a008000"), Major: 0xfd, Minor: 1, Ino: 1835044, Path: []byte("/tmp/x/state.db-shm (deleted)")}},
		{"55d0c0a00000-55d0c0a21000 r--p 00000000 103:02 42  /path with spaces/state.db", true,
			mapsEntry{Range: []byte("55d0c0a00000-55d0c0a21000"), Major: 0x103, Minor: 2, Ino: 42, Path: []byte("/path with spaces/state.db")}},
		{"7ffd5b1e0000-7ffd5b201000 rw-p 00000000 00:00 0                          [stack]", false, mapsEntry{}},
		{"7f2c1a000000-7f2c1a008000 rw-p 00000000 00:00 0 ", false, mapsEntry{}},
		{"garbage", false, mapsEntry{}},
		{"a-b rw-s 0 zz:01 5 /x", false, mapsEntry{}},
	}
	for _, c := range cases {
		got, ok := parseMapsLine([]byte(c.line))
		if ok != c.ok {
			t.Errorf("%q: ok=%v", c.line, ok)
			continue
		}
		if ok && (string(got.Range) != string(c.want.Range) || got.Major != c.want.Major || got.Minor != c.want.Minor ||
			got.Ino != c.want.Ino || string(got.Path) != string(c.want.Path)) {
			t.Errorf("%q: got %+v", c.line, got)
		}
	}
}

func TestParseStatusIDs(t *testing.T) {
	status := "Name:\tsleep\nUid:\t1000\t1001\t1001\t1001\nGid:\t100\t200\t200\t200\nGroups:\t27 1000 \n"
	uid, groups, err := parseStatusIDs([]byte(status))
	if err != nil || uid != 1001 || !slices.Equal(groups, []int{200, 27, 1000}) {
		t.Fatalf("uid %d groups %v err %v", uid, groups, err)
	}
	if _, _, err := parseStatusIDs([]byte("Name:\tx\n")); err == nil {
		t.Fatal("status without ids parsed")
	}
}

func TestParseProcMount(t *testing.T) {
	root := "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
	for _, tt := range []struct {
		mountinfo, hide string
		hides, ok       bool
	}{
		{root + "22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n", "", false, true},
		{"22 1 0:21 / /proc rw,nosuid shared:12 - proc proc rw,hidepid=invisible,gid=10\n", "invisible", true, true},
		{"22 1 0:21 / /proc rw - proc proc rw,hidepid=2\n", "invisible", true, true},
		{"22 1 0:21 / /proc rw - proc proc rw,hidepid=4\n", "ptraceable", true, true},
		{"22 1 0:21 / /proc rw - proc proc rw,hidepid=ptraceable\n", "ptraceable", true, true},
		{"22 1 0:21 / /proc rw - proc proc rw,hidepid=1\n", "noaccess", false, true},
		{"22 1 0:21 / /proc rw - proc proc rw,hidepid=0\n", "", false, true},
		{"22 1 0:21 / /proc rw - proc proc rw,hidepid=off\n", "", false, true},
		// Another mount point, or not a proc filesystem at /proc.
		{root + "30 1 0:21 / /mnt/proc rw - proc proc rw,hidepid=2\n", "", false, false},
		{"30 1 0:21 / /proc rw - tmpfs tmpfs rw,hidepid=2\n", "", false, false},
		// The last proc mount at /proc hides the ones below it.
		{"22 1 0:21 / /proc rw - proc proc rw,hidepid=2\n23 22 0:22 / /proc rw - proc proc rw\n", "", false, true},
		{"22 1 0:21 / /proc rw - proc proc rw\n23 22 0:22 / /proc rw - proc proc rw,hidepid=invisible\n", "invisible", true, true},
	} {
		m, ok := ParseProcMount([]byte(tt.mountinfo))
		if ok != tt.ok || m.HidePID != tt.hide || m.Hides() != tt.hides {
			t.Errorf("%q: %+v ok %v hides %v; want hidepid %q ok %v hides %v", tt.mountinfo, m, ok, m.Hides(), tt.hide, tt.ok, tt.hides)
		}
	}
}

func TestParseInt(t *testing.T) {
	for in, want := range map[string]int{"0": 0, "123": 123, "4194304": 4194304} {
		if n, ok := parseInt([]byte(in)); !ok || n != want {
			t.Errorf("%q: %d %v", in, n, ok)
		}
	}
	for _, bad := range []string{"", "self", "12a", "1234567890", "-1"} {
		if _, ok := parseInt([]byte(bad)); ok {
			t.Errorf("parsed %q", bad)
		}
	}
}
