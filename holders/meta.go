//go:build linux || darwin

package holders

import (
	"github.com/shirou/gopsutil/v4/process"
)

// processMeta fills user, exe and command line from gopsutil. It is called
// only for processes that hold something, so its cost stays off the scan.
// Fields it cannot read stay empty: metadata never fails a scan.
func processMeta(p *Process) {
	gp, err := process.NewProcess(int32(p.Pid))
	if err != nil {
		return
	}
	if uids, err := gp.Uids(); err == nil && len(uids) > 0 {
		p.UID = int(uids[0])
	}
	p.User, _ = gp.Username()
	p.Exe, _ = gp.Exe()
	p.Cmdline, _ = gp.CmdlineSlice()
}
