package hermestest

import "syscall"

// dieWithParent has the kernel SIGKILL the writer when the thread that
// started it exits: a test binary killed by its -timeout or from outside
// runs no cleanup, and a writer left behind (often frozen by the agent
// under test) would hold its store for good.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
