//go:build !linux && !darwin

package store

func freeBytes(int) int64 { return -1 }
