//go:build linux && amd64

package modwatch

// openFlagsArg is where the open flags are among a system call's
// arguments: -1 for creat(2), which has none (it is write-only, creating,
// truncating).
func openFlagsArg(nr int) (int, bool) {
	switch nr {
	case 2: // open
		return 1, true
	case 257: // openat
		return 2, true
	case 85: // creat
		return -1, true
	}
	return 0, false
}
