//go:build !linux

package hermestest

import "syscall"

// dieWithParent: no parent-death signal outside Linux; the test's cleanup
// kills the writer.
func dieWithParent(*syscall.SysProcAttr) {}
