//go:build !linux && !darwin

package store

import "os"

// fileStateOf on platforms without a supported stat layout knows only what
// os.FileInfo says: no identity, so a replaced file cannot be told from the
// original and every Generation comparison there is best effort.
func fileStateOf(fi os.FileInfo) FileState {
	return FileState{Exists: true, Size: fi.Size(), Mode: fi.Mode(), UID: -1, GID: -1}
}

// identitySupported reports whether fileStateOf yields real (dev, ino).
const identitySupported = false

// noFollowFlags: the Lstat checks before each open are all there is here.
const noFollowFlags = 0

func isLoop(error) bool { return false }
