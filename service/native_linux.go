package service

// NativeKind is the service manager agentd renders for on this OS when
// none is named.
func NativeKind() ManagerKind { return Systemd }
