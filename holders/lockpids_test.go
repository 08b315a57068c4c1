package holders

import (
	"slices"
	"testing"

	"github.com/stateguard/stateguard/fileid"
)

func TestLockPidsIn(t *testing.T) {
	table := []byte(`1: POSIX  ADVISORY  READ 10662 fe:00:500 128 128
2: POSIX  ADVISORY  READ 10662 fe:00:501 1073741826 1073742335
3: OFDLCK ADVISORY  READ -1 fe:00:500 128 128
4: -> POSIX  ADVISORY  WRITE 99 fe:00:500 120 120
5: POSIX  ADVISORY  READ 42 fe:00:500 128 128
6: POSIX  ADVISORY  READ 7 fe:00:600 128 128
7: FLOCK  ADVISORY  WRITE 8 fe:00:500 0 EOF
8: POSIX  ADVISORY  READ 3 2b:00:500 128 128
garbage
`)
	// The device is ignored (the kernel's and stat's can differ); the
	// waiter, the OFD and flock locks, and self are not holders.
	got := lockPidsIn(table, []fileid.ID{{Dev: 1, Ino: 500}, {Dev: 1, Ino: 501}}, 42)
	if want := []int{3, 10662}; !slices.Equal(got, want) {
		t.Errorf("lock pids = %v, want %v", got, want)
	}
	if got := lockPidsIn(table, nil, 0); len(got) != 0 {
		t.Errorf("no inodes asked, got %v", got)
	}
}
