//go:build darwin

#include "textflag.h"

// Trampolines into libSystem for libproc_darwin.go; the same text
// assembles for amd64 and arm64.

TEXT libc_proc_listpids_trampoline<>(SB),NOSPLIT,$0-0
	JMP	libc_proc_listpids(SB)
GLOBL	·libc_proc_listpids_trampoline_addr(SB), RODATA, $8
DATA	·libc_proc_listpids_trampoline_addr(SB)/8, $libc_proc_listpids_trampoline<>(SB)

TEXT libc_proc_pidinfo_trampoline<>(SB),NOSPLIT,$0-0
	JMP	libc_proc_pidinfo(SB)
GLOBL	·libc_proc_pidinfo_trampoline_addr(SB), RODATA, $8
DATA	·libc_proc_pidinfo_trampoline_addr(SB)/8, $libc_proc_pidinfo_trampoline<>(SB)

TEXT libc_proc_pidfdinfo_trampoline<>(SB),NOSPLIT,$0-0
	JMP	libc_proc_pidfdinfo(SB)
GLOBL	·libc_proc_pidfdinfo_trampoline_addr(SB), RODATA, $8
DATA	·libc_proc_pidfdinfo_trampoline_addr(SB)/8, $libc_proc_pidfdinfo_trampoline<>(SB)
