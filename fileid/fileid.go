package fileid

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// ID is the identity of one file. Dev uses the encoding of stat(2)'s
// st_dev on the running OS (unix.Mkdev on Linux, the unsigned 32 bits of
// dev_t on macOS), the same number /proc and libproc report.
type ID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

func (id ID) String() string { return fmt.Sprintf("%d:%d", id.Dev, id.Ino) }

// IsZero reports whether id is unset (no file).
func (id ID) IsZero() bool { return id == ID{} }

// ErrIdentityChanged means a file is no longer the inode the caller
// expected: it was replaced, removed or swapped for a link between a check
// and the step that relied on it.
var ErrIdentityChanged = errors.New("file identity changed")

// State is what lstat or fstat says about one path or fd. It never
// follows a symlink.
type State struct {
	Exists bool        `json:"exists"`
	ID     ID          `json:"id"`
	Size   int64       `json:"size"`
	Nlink  uint64      `json:"nlink"`
	Mode   fs.FileMode `json:"mode"`
	UID    int         `json:"uid"` // -1 unknown
	GID    int         `json:"gid"` // -1 unknown
}

// Regular reports whether the file exists and is a regular file.
func (s State) Regular() bool { return s.Exists && s.Mode.IsRegular() }

// Missing is the State of a path with no file: Exists false, owner unknown.
func Missing() State { return State{UID: -1, GID: -1} }

// Lstat returns the State at path without following a symlink; a missing
// path is Missing() and no error.
func Lstat(path string) (State, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Missing(), nil
	}
	if err != nil {
		return Missing(), fmt.Errorf("lstat %s: %w", path, err)
	}
	return Of(fi), nil
}

// Pair is an ID in the form Hermes writes into a capture's manifest.json:
// a two-element JSON array [dev, ino] (list((st.st_dev, st.st_ino))), so
// Hermes' doctor, which compares tuple(m["wal"]["identity"]) with a
// holder's fd, recognises stateguard's captures and the other way round.
type Pair ID

// ID returns the identity.
func (p Pair) ID() ID { return ID(p) }

func (p Pair) String() string { return ID(p).String() }

// MarshalJSON writes [dev, ino].
func (p Pair) MarshalJSON() ([]byte, error) {
	return []byte("[" + strconv.FormatUint(p.Dev, 10) + "," + strconv.FormatUint(p.Ino, 10) + "]"), nil
}

// UnmarshalJSON reads [dev, ino] and, leniently, "dev:ino" or
// {"dev": d, "ino": i}, the shapes other tools have used for the same pair.
func (p *Pair) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 0 && b[0] == '[':
		var pair []uint64
		if err := json.Unmarshal(b, &pair); err != nil {
			return fmt.Errorf("identity %s: %w", b, err)
		}
		if len(pair) != 2 {
			return fmt.Errorf("identity %s: want [dev, ino]", b)
		}
		p.Dev, p.Ino = pair[0], pair[1]
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		d, i, ok := strings.Cut(s, ":")
		var err1, err2 error
		p.Dev, err1 = strconv.ParseUint(d, 10, 64)
		p.Ino, err2 = strconv.ParseUint(i, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("identity %q: want \"dev:ino\"", s)
		}
	case len(b) > 0 && b[0] == '{':
		var o struct{ Dev, Ino uint64 }
		if err := json.Unmarshal(b, &o); err != nil {
			return fmt.Errorf("identity %s: %w", b, err)
		}
		p.Dev, p.Ino = o.Dev, o.Ino
	default:
		return fmt.Errorf("identity %s: want [dev, ino]", b)
	}
	return nil
}

// Family is the identities of a store's three files, main, -wal and -shm,
// as one generation has them; a zero ID is a file that is not there.
type Family struct{ Main, WAL, SHM ID }
