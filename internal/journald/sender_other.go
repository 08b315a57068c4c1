//go:build !linux

package journald

import (
	"errors"
	"fmt"
)

type sender struct{}

func newSender(path string) (*sender, error) {
	return nil, fmt.Errorf("journald at %s: %w", path, errors.ErrUnsupported)
}

func (*sender) send([]byte) error { return errors.ErrUnsupported }

func (*sender) close() error { return nil }
