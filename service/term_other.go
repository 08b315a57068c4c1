//go:build !linux && !darwin

package service

import "os"

func isTerminal(*os.File) bool { return false }
