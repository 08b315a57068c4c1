//go:build !linux

package holders

import "github.com/stateguard/stateguard/fileid"

// Only Linux prints devices in /proc differently from stat(2).
func (w *watch) addKernelDev(string, fileid.State) {}
