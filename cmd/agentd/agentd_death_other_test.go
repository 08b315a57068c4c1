//go:build !linux

package main

import "syscall"

// dieWithTest: only Linux has a parent-death signal.
func dieWithTest(*syscall.SysProcAttr) {}
