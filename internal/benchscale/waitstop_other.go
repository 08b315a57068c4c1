//go:build !linux

package main

import (
	"errors"
	"time"
)

var errGoneFirst = errors.New("writer exited before the bench saw it stopped")

type stopped struct {
	at  time.Time
	err error
}

// watchStop needs waitid(WSTOPPED); the bench reads /proc anyway.
func watchStop(pid int) <-chan stopped {
	res := make(chan stopped, 1)
	res <- stopped{err: errors.New("benchscale runs on Linux only")}
	return res
}
