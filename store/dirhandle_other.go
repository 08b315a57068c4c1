//go:build unix && !linux && !darwin

package store

func openDirNoSymlinks(path string) (int, error) { return openDirByComponents(path) }
