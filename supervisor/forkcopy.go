package supervisor

import (
	"os"
	"sync"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
)

// A child the agent starts (an alert command) is, between fork and exec,
// a copy of the agent with every fd of the agent's: the pins of an
// incident, the guard's connection. They are O_CLOEXEC and go at the
// exec, but a holder scan in that window (it lasts milliseconds on a
// loaded machine; one scan in fifty saw one, with a child started every
// 2 ms) finds the child holding the old generation, and the check froze
// it and opened a second incident for it. Such a child never writes a
// store: it only execs.

var selfExe = sync.OnceValue(func() string {
	exe, _ := os.Readlink("/proc/self/exe")
	if exe == "" {
		exe, _ = os.Executable()
	}
	return exe
})

// forkCopy reports whether p, seen holding files of the store, is a child
// of the agent whose holds are the agent's own fds copied at its fork: it
// still runs the agent's executable (not exec'd yet), or it has exec'd
// since and none of those files is open in it any more. The executable
// is read before the fds (PeekFDs), so fds read after an exec are the
// exec'd program's own.
func forkCopy(p *holders.Process) bool {
	if p.Pid == os.Getpid() || len(p.Files) == 0 {
		return false
	}
	ids := make([]fileid.ID, 0, len(p.Files))
	for _, f := range p.Files {
		ids = append(ids, f.ID)
	}
	pk, err := holders.PeekFDs(p.Pid, ids...)
	if err != nil || pk.PPid != os.Getpid() || pk.Ref.StartTicks != p.StartTicks {
		return false // gone (exited judges it), or no child of the agent
	}
	if pk.Exe != "" && pk.Exe == selfExe() {
		return true
	}
	for _, id := range ids {
		if pk.Open[id] {
			return false
		}
	}
	return true
}
