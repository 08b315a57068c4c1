//go:build !linux

package holders

// Only Linux prints devices in /proc differently from stat(2).
func (w *watch) addKernelDev(string, FileState) {}
