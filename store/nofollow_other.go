//go:build !unix

package store

func isLoop(error) bool { return false }
