package service

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// launchd drives launchctl with the bootstrap/bootout verbs of macOS 10.10
// and later. kardianos/service still runs the legacy `launchctl load` and
// `unload`, which Apple deprecated and which report failures only as text,
// so this is ours. It lives in a portable file so its commands are tested
// on every OS.
type launchd struct {
	run    Runner
	domain string // "system" or "gui/<uid>"
	plist  string
}

// launchctlNotFound is launchctl's exit status for "Could not find
// service"; the message is checked too, since it is all older releases
// are consistent about.
const launchctlNotFound = 113

func launchdDomain(s Scope, uid int) string {
	if s == UserScope {
		return "gui/" + strconv.Itoa(uid)
	}
	return "system"
}

func (l *launchd) target() string { return l.domain + "/" + LaunchdLabel }

func (l *launchd) launchctl(ctx context.Context, args ...string) ([]byte, error) {
	return l.run.Run(ctx, "launchctl", args...)
}

// loaded reports whether the job is bootstrapped in its domain, and the
// `launchctl print` output that says so.
func (l *launchd) loaded(ctx context.Context) (bool, string, error) {
	out, err := l.launchctl(ctx, "print", l.target())
	var ce *CommandError
	if errors.As(err, &ce) && (ce.Code == launchctlNotFound || strings.Contains(ce.Output, "Could not find service")) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	return true, string(out), nil
}

// install clears a disabled override (left by `launchctl disable`), so the
// job loads at boot; like `systemctl enable`, it does not start it.
func (l *launchd) install(ctx context.Context) error {
	_, err := l.launchctl(ctx, "enable", l.target())
	return err
}

func (l *launchd) uninstall(ctx context.Context) error { return l.stop(ctx) }

func (l *launchd) postUninstall(context.Context) error { return nil }

func (l *launchd) start(ctx context.Context) error {
	ok, _, err := l.loaded(ctx)
	if err != nil {
		return err
	}
	if ok {
		// Bootstrapped but not running (it exited 0, so KeepAlive let it
		// be): kickstart without -k leaves a running one alone.
		_, err = l.launchctl(ctx, "kickstart", l.target())
		return err
	}
	_, err = l.launchctl(ctx, "bootstrap", l.domain, l.plist)
	return err
}

// stop boots the job out: with KeepAlive, killing it would only restart it.
func (l *launchd) stop(ctx context.Context) error {
	ok, _, err := l.loaded(ctx)
	if err != nil || !ok {
		return err
	}
	_, err = l.launchctl(ctx, "bootout", l.target())
	return err
}

func (l *launchd) restart(ctx context.Context) error {
	ok, _, err := l.loaded(ctx)
	if err != nil {
		return err
	}
	if !ok {
		_, err = l.launchctl(ctx, "bootstrap", l.domain, l.plist)
		return err
	}
	_, err = l.launchctl(ctx, "kickstart", "-k", l.target())
	return err
}

var (
	launchdStateRE = regexp.MustCompile(`(?m)^\s*state = (.+)$`)
	launchdPIDRE   = regexp.MustCompile(`(?m)^\s*pid = ([0-9]+)$`)
)

func (l *launchd) status(ctx context.Context, st *Status) error {
	ok, out, err := l.loaded(ctx)
	if err != nil {
		return fmt.Errorf("launchctl print %s: %w", l.target(), err)
	}
	if !ok {
		st.State = "not loaded"
		return nil
	}
	st.State = "loaded"
	if m := launchdStateRE.FindStringSubmatch(out); m != nil {
		st.State = strings.TrimSpace(m[1])
	}
	st.Running = st.State == "running"
	if m := launchdPIDRE.FindStringSubmatch(out); m != nil {
		st.PID, _ = strconv.Atoi(m[1])
	}
	return nil
}
