package control

import (
	"os/user"
	"path/filepath"
	"strconv"
)

// Names of the files agentd keeps in its state directory.
const (
	LockFile   = "agent.lock"
	SocketFile = "agent.sock"
)

// DefaultStateDir is where agentd keeps its journal and lock:
// rootStateDir as root, else $XDG_STATE_HOME/stateguard, falling back to
// ~/.local/state/stateguard. getenv is os.Getenv outside tests. It returns
// "" when no home directory can be found; PrepareStateDir refuses that.
func DefaultStateDir(getenv func(string) string, euid int) string {
	if euid == 0 {
		return rootStateDir
	}
	// The XDG spec says relative values are invalid and must be ignored.
	if d := getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "stateguard")
	}
	home := getenv("HOME")
	if !filepath.IsAbs(home) {
		home = ""
		if u, err := user.LookupId(strconv.Itoa(euid)); err == nil && filepath.IsAbs(u.HomeDir) {
			home = u.HomeDir
		}
	}
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".local", "state", "stateguard")
}

// DefaultRuntimeDir is where agentd puts its control socket: rootRuntimeDir
// as root, $XDG_RUNTIME_DIR/stateguard for users, and "run" under the state
// directory when XDG_RUNTIME_DIR is unset (no login session, e.g. cron).
func DefaultRuntimeDir(getenv func(string) string, euid int) string {
	if euid == 0 {
		return rootRuntimeDir
	}
	if d := getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		return filepath.Join(d, "stateguard")
	}
	state := DefaultStateDir(getenv, euid)
	if state == "" {
		return ""
	}
	return filepath.Join(state, "run")
}
