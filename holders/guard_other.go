//go:build !unix

package holders

const guardOpenFlags = 0

func isSymlinkErr(error) bool { return false }

func isLockConflict(error) bool { return false }
