package watcher

import (
	"os"
	"strconv"
	"strings"
)

// watchLimit is the kernel's inotify watch limit per user (0: unknown).
func watchLimit() int {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_watches")
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// limitHint says how to raise the limit.
const limitHint = "raise fs.inotify.max_user_watches (sysctl -w, and a file in /etc/sysctl.d to keep it); until then the directories past the limit are seen only by reconciles"
