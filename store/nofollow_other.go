//go:build !unix

package store

// noFollowFlags: the Lstat checks before each open are all there is here.
const noFollowFlags = 0

func isLoop(error) bool { return false }
