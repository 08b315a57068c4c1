//go:build !unix

package holders

import "os"

// ExclusiveLocker needs POSIX record locks.
func ExclusiveLocker(*os.File) (int, bool) { return 0, false }
