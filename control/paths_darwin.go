package control

// /run cannot be created on macOS's read-only system volume; /var/run is
// where launchd daemons keep their sockets.
const (
	rootStateDir   = "/var/lib/stateguard"
	rootRuntimeDir = "/var/run/stateguard"
)
