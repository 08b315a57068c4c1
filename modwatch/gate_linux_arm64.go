//go:build linux && arm64

package modwatch

// openFlagsArg is where the open flags are among a system call's
// arguments (arm64 has openat only, and openat2, whose flags are in
// memory).
func openFlagsArg(nr int) (int, bool) {
	if nr == 56 { // openat
		return 2, true
	}
	return 0, false
}
