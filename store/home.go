package store

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stateguard/stateguard/fileid"
)

// Where a Home was found.
const (
	SourceEnv    = "env"    // $HERMES_HOME
	SourceUser   = "user"   // the running user's ~/.hermes
	SourcePasswd = "passwd" // a home directory from the password database
	SourceConfig = "config" // an explicit home from the config file
)

// Home is one Hermes home: the root holding the default profile's state.db
// and the profiles/ directory.
type Home struct {
	// Root is absolute and symlink-resolved, so it matches the paths the
	// kernel reports for open files (/proc/<pid>/fd targets) under it.
	Root   string
	Source string
	UID    int // owner of Root; -1 unknown
}

// DiscoverOptions say where to look for homes. The zero value looks where
// Hermes itself would, for the running user, and also in every home of the
// password database when running as root.
type DiscoverOptions struct {
	Getenv   func(string) string // default os.Getenv
	UserHome string              // default os.UserHomeDir()
	// AllUsers scans the password database even when not running as root.
	// As root it is on unless CurrentUserOnly is set.
	AllUsers bool
	// CurrentUserOnly turns the password database scan off, even as root.
	CurrentUserOnly bool
	PasswdPath      string   // default /etc/passwd
	ExtraHomes      []string // explicit homes (config); a missing one is a Problem
	ExtraStores     []string // explicit store files (config), Kind Generic
	// MaxProfiles bounds the named profiles taken from one home (0:
	// DefaultMaxProfiles; negative: no bound), so one home flooded with
	// directories cannot make discovery, and everything after it, take
	// unbounded time and memory. The rest are one Problem.
	MaxProfiles int
}

// DefaultMaxProfiles is the per-home bound on named profiles.
const DefaultMaxProfiles = 10000

func (o DiscoverOptions) maxProfiles() int {
	if o.MaxProfiles == 0 {
		return DefaultMaxProfiles
	}
	return o.MaxProfiles
}

func (o DiscoverOptions) getenv(k string) string {
	if o.Getenv != nil {
		return o.Getenv(k)
	}
	return os.Getenv(k)
}

func (o DiscoverOptions) allUsers() bool {
	if o.CurrentUserOnly {
		return false
	}
	return o.AllUsers || os.Geteuid() == 0
}

// DiscoverHomes finds the Hermes homes to watch: $HERMES_HOME, else the
// running user's ~/.hermes (plus $HERMES_DATA_DIR_SUFFIX); every home
// directory in the password database that has a .hermes when scanning all
// users; and ExtraHomes. Homes are deduplicated by resolved path and by
// (dev, ino), the first source winning.
//
// A default home that does not exist is not a problem: Hermes may simply
// not be installed for that user. $HERMES_HOME and ExtraHomes are explicit,
// so a missing one is reported.
func DiscoverHomes(o DiscoverOptions) ([]Home, []Problem) {
	var hs homeSet
	if hh := o.getenv("HERMES_HOME"); hh != "" {
		hs.add(hermesHomeRoot(hh), SourceEnv, true)
	} else {
		uh := o.UserHome
		if uh == "" {
			var err error
			if uh, err = os.UserHomeDir(); err != nil && !o.allUsers() {
				hs.problems = append(hs.problems, Problem{Path: "~", Err: fmt.Errorf("user home: %w", err),
					Hint: "set HOME or HERMES_HOME, or configure the home explicitly"})
			}
		}
		if uh != "" {
			hs.add(filepath.Join(uh, ".hermes"+o.getenv("HERMES_DATA_DIR_SUFFIX")), SourceUser, false)
		}
	}
	if o.allUsers() {
		path := o.PasswdPath
		if path == "" {
			path = "/etc/passwd"
		}
		accts, err := passwdHomes(path)
		if err != nil {
			hs.problems = append(hs.problems, Problem{Path: path, Err: err,
				Hint: "other users' homes are not scanned; configure them explicitly"})
		}
		for _, a := range accts {
			hs.addOwned(filepath.Join(a.dir, ".hermes"), SourcePasswd, false, a.uid)
		}
	}
	for _, h := range o.ExtraHomes {
		hs.add(hermesHomeRoot(h), SourceConfig, true)
	}
	return hs.homes, hs.problems
}

// hermesHomeRoot applies Hermes' rule that a HERMES_HOME of the form
// <root>/profiles/<name> means the home <root>: a process started for a
// named profile still belongs to the home that holds all profiles.
func hermesHomeRoot(p string) string {
	p = filepath.Clean(p)
	parent := filepath.Dir(p)
	if filepath.Base(parent) == "profiles" && validProfileName(filepath.Base(p)) {
		return filepath.Dir(parent)
	}
	return p
}

type homeSet struct {
	homes    []Home
	problems []Problem
	paths    map[string]bool
	ids      map[fileid.ID]bool
}

func (hs *homeSet) add(path, source string, explicit bool) {
	hs.addOwned(path, source, explicit, -1)
}

// addOwned adds a home; wantUID >= 0 is the uid of the account whose home
// it is, which a symlinked home must belong to.
func (hs *homeSet) addOwned(path, source string, explicit bool, wantUID int) {
	abs, err := filepath.Abs(path)
	if err != nil {
		hs.problems = append(hs.problems, Problem{Path: path, Err: err})
		return
	}
	if fi, err := os.Lstat(abs); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		// Resolved once: the home is the target followTrustedLink
		// checked, not what the link names by the time it is resolved
		// again.
		real, id, err := followTrustedLink(abs, wantUID)
		switch {
		case err == nil:
			hs.addResolved(real, source, id.ID, id.UID)
		case errors.Is(err, fs.ErrNotExist):
			if explicit {
				hs.problems = append(hs.problems, Problem{Path: abs, Err: ErrMissingHome,
					Hint: fmt.Sprintf("create it or remove it from the %s settings", sourceWord(source))})
			}
		default:
			hs.problems = append(hs.problems, Problem{Path: abs, Err: err, Hint: "this Hermes home is " + untrustedLinkHint})
		}
		return
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		if explicit {
			hs.problems = append(hs.problems, Problem{Path: abs, Err: ErrMissingHome,
				Hint: fmt.Sprintf("create it or remove it from the %s settings", sourceWord(source))})
		}
		return
	}
	if err != nil {
		hs.problems = append(hs.problems, Problem{Path: abs, Err: fmt.Errorf("resolve home: %w", err),
			Hint: "check the permissions of the directories above it"})
		return
	}
	fi, err := os.Stat(real)
	if err != nil {
		hs.problems = append(hs.problems, Problem{Path: abs, Err: fmt.Errorf("stat home: %w", err)})
		return
	}
	if !fi.IsDir() {
		hs.problems = append(hs.problems, Problem{Path: abs, Err: errors.New("home is not a directory"),
			Hint: "a Hermes home is a directory holding state.db and profiles/"})
		return
	}
	st := fileid.Of(fi)
	hs.addResolved(real, source, st.ID, st.UID)
}

// addResolved adds the home at the resolved path real, once.
func (hs *homeSet) addResolved(real, source string, id fileid.ID, uid int) {
	if hs.paths == nil {
		hs.paths = map[string]bool{}
		hs.ids = map[fileid.ID]bool{}
	}
	if hs.paths[real] || (fileid.Supported && hs.ids[id]) {
		return
	}
	hs.paths[real] = true
	hs.ids[id] = true
	hs.homes = append(hs.homes, Home{Root: real, Source: source, UID: uid})
}

func sourceWord(source string) string {
	if source == SourceEnv {
		return "HERMES_HOME environment"
	}
	return "config file"
}

// passwdHomes returns the absolute home directories of a passwd(5) file,
// each once, in file order. Malformed lines are skipped: one bad entry must
// not hide every other user's stores.
type passwdHome struct {
	dir string
	uid int // -1 when the field is not a number
}

func passwdHomes(path string) ([]passwdHome, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read password database: %w", err)
	}
	defer f.Close()
	var dirs []passwdHome
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fields := strings.Split(line, ":")
		if len(fields) < 7 {
			continue
		}
		dir := filepath.Clean(fields[5])
		if !filepath.IsAbs(dir) || seen[dir] {
			continue
		}
		seen[dir] = true
		uid, err := strconv.Atoi(fields[2])
		if err != nil || uid < 0 {
			uid = -1
		}
		dirs = append(dirs, passwdHome{dir: dir, uid: uid})
	}
	if err := sc.Err(); err != nil {
		return dirs, fmt.Errorf("read password database: %w", err)
	}
	return dirs, nil
}
