package store

// openDirNoSymlinks: macOS has no openat2; every component is opened with
// O_NOFOLLOW|O_DIRECTORY.
func openDirNoSymlinks(path string) (int, error) { return openDirByComponents(path) }
