package store

import (
	"errors"
	"fmt"
)

var (
	// ErrNotRegular means a store path is a symlink, directory, FIFO or
	// anything else that is not a regular file. Symlinks are never followed:
	// a link planted at a profile's state.db must not redirect the agent.
	ErrNotRegular = errors.New("not a regular file")

	// ErrMissingHome means an explicitly configured home does not exist.
	ErrMissingHome = errors.New("home directory does not exist")

	// ErrTooManyProfiles means a home's profiles/ holds more profile
	// directories than discovery takes from one home; the rest are not
	// watched.
	ErrTooManyProfiles = errors.New("too many profile directories")
)

// Problem is something discovery could not use, with the path it concerns
// and a hint the operator can act on. Discovery goes on past a Problem: one
// bad profile never hides the others.
type Problem struct {
	Path string
	Err  error
	Hint string
}

func (p Problem) Error() string {
	s := fmt.Sprintf("%s: %v", p.Path, p.Err)
	if p.Hint != "" {
		s += " (" + p.Hint + ")"
	}
	return s
}

func (p Problem) Unwrap() error { return p.Err }
