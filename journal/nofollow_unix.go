//go:build unix

package journal

import "syscall"

const oNoFollow = syscall.O_NOFOLLOW
