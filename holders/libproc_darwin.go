package holders

import (
	"syscall"
	"unsafe"
)

// libproc is called through libSystem trampolines (the mechanism the Go
// runtime and golang.org/x/sys/unix use on macOS), not cgo, so the agent
// cross-compiles. The raw proc_info system call (SYS_PROC_INFO via
// unix.Syscall6) would be simpler, but Apple does not keep the system call
// ABI stable and Go stopped issuing raw system calls on macOS for that
// reason; libSystem's proc_* functions are the supported interface.
//
// proc_pidinfo and friends return 0 on failure without a usable errno
// through this path, so callers tell "gone" from "not permitted" with
// kill(pid, 0).

//go:linkname syscall_syscall6 syscall.syscall6
func syscall_syscall6(fn, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2 uintptr, err syscall.Errno)

var libc_proc_listpids_trampoline_addr uintptr

//go:cgo_import_dynamic libc_proc_listpids proc_listpids "/usr/lib/libSystem.B.dylib"

var libc_proc_pidinfo_trampoline_addr uintptr

//go:cgo_import_dynamic libc_proc_pidinfo proc_pidinfo "/usr/lib/libSystem.B.dylib"

var libc_proc_pidfdinfo_trampoline_addr uintptr

//go:cgo_import_dynamic libc_proc_pidfdinfo proc_pidfdinfo "/usr/lib/libSystem.B.dylib"

func bufPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// procListPids is int proc_listpids(uint32_t type, uint32_t typeinfo,
// void *buffer, int buffersize); with a nil buffer it returns the size
// needed.
func procListPids(buf []byte) int {
	p := bufPtr(buf)
	r, _, _ := syscall_syscall6(libc_proc_listpids_trampoline_addr,
		procAllPids, 0, uintptr(p), uintptr(len(buf)), 0, 0)
	return int(int32(r))
}

// procPidInfo is int proc_pidinfo(int pid, int flavor, uint64_t arg,
// void *buffer, int buffersize).
func procPidInfo(pid, flavor int, buf []byte) int {
	p := bufPtr(buf)
	r, _, _ := syscall_syscall6(libc_proc_pidinfo_trampoline_addr,
		uintptr(pid), uintptr(flavor), 0, uintptr(p), uintptr(len(buf)), 0)
	return int(int32(r))
}

// procPidFDInfo is int proc_pidfdinfo(int pid, int fd, int flavor,
// void *buffer, int buffersize).
func procPidFDInfo(pid, fd, flavor int, buf []byte) int {
	p := bufPtr(buf)
	r, _, _ := syscall_syscall6(libc_proc_pidfdinfo_trampoline_addr,
		uintptr(pid), uintptr(fd), uintptr(flavor), uintptr(p), uintptr(len(buf)), 0)
	return int(int32(r))
}
