package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// HomesDropIn is the drop-in `agentd install --refresh` writes next to the
// system unit: the unit's ReadWritePaths as this host needs them today.
// ReadWritePaths accumulate across the unit and its drop-ins, so it only
// ever adds directories; a drop-in sorting after it (systemctl edit's
// override.conf) still has the last word.
const HomesDropIn = "50-homes.conf"

// RenderHomesDropIn renders the drop-in holding s.ReadWritePaths.
func (s Spec) RenderHomesDropIn() ([]byte, error) {
	if s.Kind != Systemd || s.Scope != SystemScope {
		return nil, fmt.Errorf("only the system-wide systemd unit has writable paths to refresh (this is the %s %s service)", s.Scope, s.Kind)
	}
	var b strings.Builder
	b.WriteString("# stateguard agent: the directories where Hermes homes live on this host,\n")
	b.WriteString("# writable for agentd under ProtectSystem=strict. Written by\n")
	b.WriteString("# `agentd install --refresh` from the password database, useradd's default\n")
	b.WriteString("# and the config; run it again after adding a user or a home elsewhere, then\n")
	b.WriteString("# `agentd restart` (the paths apply when the service starts).\n")
	b.WriteString("[Service]\n")
	for _, p := range s.ReadWritePaths {
		prefix := ""
		if strings.HasPrefix(p, "-") {
			prefix, p = "-", p[1:]
		}
		w, err := systemdWord(p, false)
		if err != nil {
			return nil, fmt.Errorf("render drop-in: ReadWritePaths: %w", err)
		}
		b.WriteString("ReadWritePaths=" + prefix + w + "\n")
	}
	return []byte(b.String()), nil
}

// DropInPath is where the homes drop-in of the system unit goes: the
// unit's directory in /etc (or Dir), whether the unit itself is there or
// shipped by the package.
func (m *Manager) DropInPath() (string, error) {
	p, err := m.Path()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(p), UnitName+".d", HomesDropIn), nil
}

// WriteHomesDropIn writes the homes drop-in and has systemd read it. It
// needs an installed unit (ours or the package's) and does not restart
// the service.
func (m *Manager) WriteHomesDropIn(ctx context.Context, content []byte) (string, error) {
	kind, err := m.kind()
	if err != nil {
		return "", err
	}
	if kind != Systemd || m.Scope != SystemScope {
		return "", fmt.Errorf("only the system-wide systemd unit has a homes drop-in")
	}
	b, path, err := m.backend()
	if err != nil {
		return "", err
	}
	if _, _, ok := m.installed(path); !ok {
		return "", fmt.Errorf("%w: no %s (install the package or run `agentd install` first)", ErrNotInstalled, path)
	}
	dropIn, err := m.DropInPath()
	if err != nil {
		return "", err
	}
	if err := writeFileAtomic(dropIn, content, 0o644); err != nil {
		return dropIn, err
	}
	sd, ok := b.(*systemd)
	if !ok {
		return dropIn, nil
	}
	if _, err := sd.systemctl(ctx, "daemon-reload"); err != nil {
		return dropIn, fmt.Errorf("wrote %s, but systemd did not reload it: %w", dropIn, err)
	}
	return dropIn, nil
}

// removeHomesDropIn removes the drop-in and its directory if that is left
// empty; Uninstall calls it, since the drop-in belongs to the install.
func (m *Manager) removeHomesDropIn() error {
	dropIn, err := m.DropInPath()
	if err != nil {
		return err
	}
	if err := os.Remove(dropIn); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", dropIn, err)
	}
	_ = os.Remove(filepath.Dir(dropIn)) // only when empty: another drop-in is the admin's
	return nil
}
