package supervisor

const (
	rootStateDir   = "/var/lib/stateguard"
	rootRuntimeDir = "/run/stateguard"
)
