package service

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// systemd drives systemctl. These are the commands kardianos/service runs
// for start, stop, restart and status too; running them through Runner
// lets a test record them and puts systemctl's own message into errors.
// Install differs from kardianos on purpose: daemon-reload before enable
// (so enable reads the new file), an atomic write, and the user unit under
// $XDG_CONFIG_HOME.
type systemd struct {
	run  Runner
	user bool
}

func (s *systemd) systemctl(ctx context.Context, args ...string) ([]byte, error) {
	if s.user {
		args = append([]string{"--user"}, args...)
	}
	out, err := s.run.Run(ctx, "systemctl", args...)
	if err != nil {
		return out, fmt.Errorf("%w (hint: `journalctl%s -u %s` shows why)", err, map[bool]string{true: " --user", false: ""}[s.user], UnitName)
	}
	return out, nil
}

func (s *systemd) install(ctx context.Context) error {
	if _, err := s.systemctl(ctx, "daemon-reload"); err != nil {
		return err
	}
	_, err := s.systemctl(ctx, "enable", UnitName)
	return err
}

func (s *systemd) uninstall(ctx context.Context) error {
	_, err := s.systemctl(ctx, "disable", "--now", UnitName)
	return err
}

func (s *systemd) postUninstall(ctx context.Context) error {
	_, err := s.systemctl(ctx, "daemon-reload")
	return err
}

func (s *systemd) start(ctx context.Context) error {
	_, err := s.systemctl(ctx, "start", UnitName)
	return err
}

func (s *systemd) stop(ctx context.Context) error {
	_, err := s.systemctl(ctx, "stop", UnitName)
	return err
}

func (s *systemd) restart(ctx context.Context) error {
	_, err := s.systemctl(ctx, "restart", UnitName)
	return err
}

// status reads `systemctl show`, whose key=value lines (unlike is-active's
// exit codes) tell "not installed", "stopped" and "failed" apart.
func (s *systemd) status(ctx context.Context, st *Status) error {
	out, err := s.systemctl(ctx, "show", "--property=LoadState,ActiveState,SubState,MainPID", UnitName)
	if err != nil {
		return err
	}
	props := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			props[k] = v
		}
	}
	if props["LoadState"] == "" {
		return fmt.Errorf("systemctl show %s: unexpected output %q", UnitName, strings.TrimSpace(string(out)))
	}
	if props["LoadState"] != "not-found" {
		st.Installed = true
	}
	st.State = props["ActiveState"]
	if sub := props["SubState"]; sub != "" && sub != st.State {
		st.State += " (" + sub + ")"
	}
	switch props["ActiveState"] {
	case "active", "reloading", "activating", "deactivating":
		st.Running = true
	}
	if pid, err := strconv.Atoi(props["MainPID"]); err == nil && pid > 0 {
		st.PID = pid
	}
	return nil
}
