//go:build !linux

package main

import (
	"errors"
	"runtime"
)

func setNondumpable() error {
	return errors.New("-nondumpable is Linux only, not " + runtime.GOOS)
}
