package sdnotify

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The environment variables systemd passes to a notify service. Clear
// them (Unsetenv) once read, so the commands agentd starts (alert.exec)
// cannot speak for it.
const (
	EnvSocket       = "NOTIFY_SOCKET"
	EnvWatchdogUsec = "WATCHDOG_USEC"
	EnvWatchdogPID  = "WATCHDOG_PID"
)

// Messages agentd sends. Status and Reloading build the ones with values.
const (
	Ready    = "READY=1"
	Stopping = "STOPPING=1"
	Watchdog = "WATCHDOG=1"
)

// Status is a STATUS= line, shown by `systemctl status`. A newline would
// end the assignment early, so it becomes a space.
func Status(s string) string {
	return "STATUS=" + strings.NewReplacer("\n", " ", "\r", " ").Replace(s)
}

// Reloading is RELOADING=1 with the MONOTONIC_USEC= timestamp systemd
// 253 and later require to match it to the reload it asked for; older
// managers ignore the extra line.
func Reloading() string {
	return "RELOADING=1\nMONOTONIC_USEC=" + strconv.FormatInt(monotonicUsec(), 10)
}

// Notifier sends messages to the service manager. A nil *Notifier (no
// $NOTIFY_SOCKET) accepts every call and sends nothing, so callers never
// check whether they run under systemd.
type Notifier struct {
	addr *net.UnixAddr
}

// New returns a Notifier for the socket named by the value of
// $NOTIFY_SOCKET: nil for "", an error for an address it cannot use.
func New(socket string) (*Notifier, error) {
	switch {
	case socket == "":
		return nil, nil
	case strings.HasPrefix(socket, "@"):
		// Go's sockaddr conversion turns a leading '@' into the NUL of
		// the abstract namespace, which is what systemd means by it.
	case strings.HasPrefix(socket, "/"):
	default:
		// systemd 254 added vsock:CID:PORT for services in VMs; agentd
		// runs on the host it protects.
		return nil, fmt.Errorf("%s=%q: want an absolute path or an @abstract socket name (vsock is not supported)", EnvSocket, socket)
	}
	return &Notifier{addr: &net.UnixAddr{Name: socket, Net: "unixgram"}}, nil
}

// FromEnv is New on $NOTIFY_SOCKET as getenv reports it.
func FromEnv(getenv func(string) string) (*Notifier, error) {
	return New(getenv(EnvSocket))
}

// Enabled reports whether messages go anywhere.
func (n *Notifier) Enabled() bool { return n != nil }

// Socket is the socket messages go to ("" for a nil Notifier).
func (n *Notifier) Socket() string {
	if n == nil {
		return ""
	}
	return n.addr.Name
}

// Notify sends the messages as one datagram, so systemd applies them
// together (a STATUS= with its READY=1). Each call uses a socket of its
// own, as sd_notify does: a socket systemd re-created (daemon-reexec) is
// found again by its name.
func (n *Notifier) Notify(msgs ...string) error {
	if n == nil || len(msgs) == 0 {
		return nil
	}
	return n.send(strings.Join(msgs, "\n")+"\n", nil)
}

// send writes one datagram, with oob (fds) when given, from an
// unconnected socket: Go's net refuses control data on a connected one.
func (n *Notifier) send(msg string, oob []byte) error {
	fd, err := dgramSocket()
	if err != nil {
		return fmt.Errorf("notify %s: socket: %w", n.addr.Name, err)
	}
	defer unix.Close(fd)
	// A manager that stopped reading must not hold up the agent.
	tv := unix.NsecToTimeval(time.Second.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		return fmt.Errorf("notify %s: %w", n.addr.Name, err)
	}
	if err := unix.Sendmsg(fd, []byte(msg), oob, &unix.SockaddrUnix{Name: n.addr.Name}, 0); err != nil {
		return fmt.Errorf("notify %s: %w", n.addr.Name, err)
	}
	return nil
}

// ErrWatchdogValue is wrapped by WatchdogInterval for a value systemd
// would never send.
var ErrWatchdogValue = errors.New("invalid watchdog setting")

// WatchdogInterval is the watchdog timeout systemd expects keepalives
// within (WatchdogSec=), or 0 when there is none or it is meant for
// another process (WATCHDOG_PID names a different pid). Keepalives
// should go out at half of it or more often.
func WatchdogInterval(getenv func(string) string, pid int) (time.Duration, error) {
	usec := getenv(EnvWatchdogUsec)
	if usec == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(usec, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: %s=%q is not a positive number of microseconds", ErrWatchdogValue, EnvWatchdogUsec, usec)
	}
	if p := getenv(EnvWatchdogPID); p != "" {
		wp, err := strconv.Atoi(p)
		if err != nil || wp <= 0 {
			return 0, fmt.Errorf("%w: %s=%q is not a pid", ErrWatchdogValue, EnvWatchdogPID, p)
		}
		if wp != pid {
			return 0, nil
		}
	}
	if n > math.MaxInt64/int64(time.Microsecond) {
		return 0, fmt.Errorf("%w: %s=%q is out of range", ErrWatchdogValue, EnvWatchdogUsec, usec)
	}
	return time.Duration(n) * time.Microsecond, nil
}

// Unsetenv removes the notify and watchdog variables from this process's
// environment, so no child inherits them.
func Unsetenv() {
	for _, k := range []string{EnvSocket, EnvWatchdogUsec, EnvWatchdogPID} {
		os.Unsetenv(k)
	}
}
