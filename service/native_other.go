//go:build !linux && !darwin

package service

// NativeKind is the service manager agentd renders for on this OS when
// none is named: none here.
func NativeKind() ManagerKind { return "" }
