package control

const (
	rootStateDir   = "/var/lib/stateguard"
	rootRuntimeDir = "/run/stateguard"
)
