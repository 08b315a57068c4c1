package hermestest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// containerScript runs inside the new namespaces: bind-mount the profile
// directory ($1) at the volume path ($2), then run the writer as a child
// of sh (the namespace's pid 1), from a subshell that execs it with the
// test's stderr. sh's own stderr is /dev/null from then on: when an
// incident kills the writer (policy kill), dash reports it as a bare
// "Killed" line on its stderr, the test's: the unexplained "Killed" lines
// of full runs (three a run, one per TestToolTableContainer row).
const containerScript = `mount --bind "$1" "$2" || exit 97; shift 2; exec 3>&2 2>/dev/null; (exec "$@" 2>&3 3>&-); exit $?`

// StartContainerWriter runs the test writer as a gateway in a container
// would: in its own mount and pid namespaces (`unshare --mount --pid
// --fork`, as root), with dir bind-mounted at volume; o.DB must be the
// store's path under volume. Its fds name files by the volume path, which
// on the host is an empty directory. Pid is the writer's host pid; Kill
// ends the whole container. The ack file is a host path, visible inside.
func StartContainerWriter(tb testing.TB, o WriterOptions, dir, volume string) *Writer {
	tb.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		tb.Skipf("a container writer needs unshare and root (%v)", err)
	}
	bin, err := WriterBinary()
	if err != nil {
		tb.Fatal(err)
	}
	if o.Ack == "" {
		o.Ack = filepath.Join(tb.TempDir(), "ack")
	}
	args := append([]string{"--mount", "--pid", "--fork", "--kill-child", "--propagation", "private",
		"sh", "-c", containerScript, "container", dir, volume, bin}, o.Args()...)
	w, err := spawn(exec.Command(unshare, args...), o, 30*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		w.Kill()
		<-w.done
	})
	pid, err := grandchild(w.Cmd.Process.Pid)
	if err != nil {
		tb.Fatal(err)
	}
	w.Pid = pid
	return w
}

// grandchild is the writer under unshare → sh.
func grandchild(pid int) (int, error) {
	for range 2 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		f := strings.Fields(string(b))
		if err != nil || len(f) != 1 {
			return 0, fmt.Errorf("child of %d: %q %v", pid, f, err)
		}
		if pid, err = strconv.Atoi(f[0]); err != nil {
			return 0, err
		}
	}
	return pid, nil
}
