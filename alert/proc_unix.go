//go:build unix

package alert

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the alert command in a group of its own, so a
// timeout can kill what it forked as well (a `sleep` in a shell script
// would otherwise outlive it and keep its pipes open).
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

func killProcessGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
