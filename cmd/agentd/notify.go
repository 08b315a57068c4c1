package main

import (
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/stateguard/stateguard/internal/sdnotify"
)

// serviceNotify tells systemd (Type=notify) where agentd is. Outside
// systemd it does nothing. A failed send is logged once: the agent goes
// on protecting stores whatever the manager hears.
type serviceNotify struct {
	n        *sdnotify.Notifier
	watchdog time.Duration // WatchdogSec= meant for this process; 0: none
	log      *slog.Logger
	once     sync.Once
}

// newServiceNotify reads $NOTIFY_SOCKET and clears it (and the watchdog
// variables) from the environment, so no command agentd starts can speak
// for it.
func newServiceNotify(log *slog.Logger) *serviceNotify {
	n, err := sdnotify.FromEnv(os.Getenv)
	if err != nil {
		log.Warn("not telling the service manager anything", "subsystem", "notify", "err", err)
	}
	wd, err := sdnotify.WatchdogInterval(os.Getenv, os.Getpid())
	if err != nil {
		log.Warn("ignoring the service manager's watchdog setting", "subsystem", "notify", "err", err)
	}
	if n == nil {
		wd = 0 // nowhere to send keepalives
	}
	sdnotify.Unsetenv()
	return &serviceNotify{n: n, watchdog: wd, log: log}
}

func (s *serviceNotify) send(msgs ...string) {
	if err := s.n.Notify(msgs...); err != nil {
		s.once.Do(func() {
			s.log.Warn("service manager notification failed", "subsystem", "notify", "socket", s.n.Socket(), "err", err)
		})
	}
}
