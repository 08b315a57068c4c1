//go:build !linux

package watcher

// watchLimit is unknown here: kqueue watches cost file descriptors.
func watchLimit() int { return 0 }

const limitHint = "raise the open-file limit (ulimit -n, launchd's NumberOfFiles); until then the directories past it are seen only by reconciles"
