package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
)

// Kind says what the agent may do with a store beyond watching its files.
type Kind int

const (
	// Hermes stores get the whole incident protocol, divert and replay
	// included.
	Hermes Kind = iota
	// Generic stores are any other SQLite file: detect, freeze, pin and
	// capture, but no row replay.
	Generic
)

func (k Kind) String() string {
	switch k {
	case Hermes:
		return "hermes"
	case Generic:
		return "generic"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// DefaultProfile is the name of the profile whose store is <root>/state.db.
const DefaultProfile = "default"

// Store is one watched SQLite database.
type Store struct {
	Profile string // "default", a profile name, or "" for a Generic store
	Home    string // the home root; for a Generic store its directory
	Path    string // absolute path of the main file (state.db)
	Kind    Kind
	// DirID is the store directory's inode and owner as discovery saw
	// them; every step that reads or writes under the directory opens it
	// again without following a symlink and refuses a different one
	// (OpenDir). Zero when the directory does not exist or was not
	// discovered (a store resumed from the journal).
	DirID DirID
}

// OpenDir opens the store's directory and checks it is still the one
// discovery recorded.
func (s Store) OpenDir() (*DirHandle, error) { return OpenDir(s.Dir(), s.DirID) }

// Dir is the directory the store's files live in, the one to watch.
func (s Store) Dir() string { return filepath.Dir(s.Path) }

// WALPath is the path of the store's write-ahead log.
func (s Store) WALPath() string { return s.Path + "-wal" }

// SHMPath is the path of the store's shared-memory index.
func (s Store) SHMPath() string { return s.Path + "-shm" }

// Key identifies the store stably across rescans: its main file's path.
func (s Store) Key() string { return s.Path }

var profileName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

func validProfileName(name string) bool {
	return name != DefaultProfile && profileName.MatchString(name)
}

// Profiles lists the stores of home h by Hermes' rules: `default` is
// <root>/state.db; a named profile is <root>/profiles/<name>/state.db for a
// name matching ^[a-z0-9][a-z0-9_-]{0,63}$, other than "default", and not
// tombstoned by <root>/profiles/.deleted/<name>. Entries that break the
// rules are skipped silently, as Hermes skips them.
//
// A profile whose state.db does not exist yet is still a Store: Hermes
// creates the file on the profile's first run, and the watcher must already
// be looking when it does. The same holds for the default profile of a home
// that exists. A state.db that is a symlink or not a regular file is a
// Problem and not a Store: it is never followed or opened.
//
// Profiles only lstats and lists directories; it opens no store file, so it
// is safe to call at any time. Call it again to see profiles created since.
func Profiles(h Home) ([]Store, []Problem) { return ProfilesMax(h, -1) }

// ProfilesMax is Profiles taking at most max named profiles (negative: no
// bound), in name order; the directories past the bound are counted, not
// examined, and reported as one ErrTooManyProfiles Problem.
func ProfilesMax(h Home, max int) ([]Store, []Problem) {
	var stores []Store
	var problems []Problem
	fi, err := os.Stat(h.Root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, []Problem{{Path: h.Root, Err: ErrMissingHome, Hint: "the home was removed or never created"}}
	case err != nil:
		return nil, []Problem{{Path: h.Root, Err: fmt.Errorf("stat home: %w", err)}}
	case !fi.IsDir():
		return nil, []Problem{{Path: h.Root, Err: errors.New("home is not a directory")}}
	}

	add := func(name, path string) {
		if p, ok := checkStoreFile(path); !ok {
			problems = append(problems, p)
			return
		}
		id, err := lstatDirID(filepath.Dir(path))
		if err != nil {
			problems = append(problems, Problem{Path: filepath.Dir(path), Err: err,
				Hint: "the profile directory is not a plain directory; not watched"})
			return
		}
		stores = append(stores, Store{Profile: name, Home: h.Root, Path: path, Kind: Hermes, DirID: id})
	}
	add(DefaultProfile, filepath.Join(h.Root, "state.db"))

	dir, prob, ok := profilesDir(h)
	if !ok {
		if prob.Path != "" {
			problems = append(problems, prob)
		}
		return stores, problems
	}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return stores, problems
	case err != nil:
		return stores, append(problems, Problem{Path: dir, Err: fmt.Errorf("list profiles: %w", err),
			Hint: "named profiles of this home are not watched; check the directory's permissions"})
	}
	tombs := filepath.Join(dir, ".deleted")
	named, over := 0, 0
	for _, e := range entries { // ReadDir sorts by name
		name := e.Name()
		if !validProfileName(name) {
			continue
		}
		if max >= 0 && named >= max {
			over++
			continue
		}
		named++
		if _, err := os.Lstat(filepath.Join(tombs, name)); err == nil {
			continue
		}
		pdir := filepath.Join(dir, name)
		switch t := e.Type(); {
		case t.IsDir():
		case t&fs.ModeSymlink != 0:
			problems = append(problems, Problem{Path: pdir, Err: fmt.Errorf("profile directory is a symlink: %w", ErrNotRegular),
				Hint: "not followed; configure the real directory's state.db as a store if it should be watched"})
			continue
		default:
			continue // a stray file named like a profile
		}
		add(name, filepath.Join(pdir, "state.db"))
	}
	if over > 0 {
		problems = append(problems, Problem{Path: dir,
			Err:  fmt.Errorf("%w: %d more than the %d taken from one home", ErrTooManyProfiles, over, max),
			Hint: "the profiles past the bound (in name order) are not watched; remove stray directories, or raise max_profiles_per_home"})
	}
	return stores, problems
}

// checkStoreFile accepts a store path whose main file is missing or a
// regular file; anything else is a Problem.
func checkStoreFile(path string) (Problem, bool) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Problem{}, true
	case err != nil:
		return Problem{Path: path, Err: fmt.Errorf("lstat store: %w", err),
			Hint: "check the permissions of the profile directory"}, false
	case fi.Mode()&fs.ModeSymlink != 0:
		return Problem{Path: path, Err: fmt.Errorf("store is a symlink: %w", ErrNotRegular),
			Hint: "not followed; Hermes stores are regular files, replace the link or configure its target explicitly"}, false
	case !fi.Mode().IsRegular():
		return Problem{Path: path, Err: fmt.Errorf("store is a %v: %w", fileType(fi.Mode()), ErrNotRegular),
			Hint: "a Hermes store is a regular file; move the entry away"}, false
	}
	return Problem{}, true
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// Discover returns every store to watch: the profiles of every discovered
// home, then ExtraStores as Generic stores (a configured store that is also
// a discovered profile stays Hermes). An ExtraStores file that does not
// exist yet is still a Store, but its directory must exist.
//
// The result is sorted by home, then the default profile first, then by
// profile name and path, so repeated calls on an unchanged tree are equal.
func Discover(o DiscoverOptions) ([]Store, []Problem) {
	homes, problems := DiscoverHomes(o)
	var stores []Store
	seen := map[string]bool{}
	for _, h := range homes {
		ss, ps := ProfilesMax(h, o.maxProfiles())
		problems = append(problems, ps...)
		for _, s := range ss {
			if !seen[s.Key()] {
				seen[s.Key()] = true
				stores = append(stores, s)
			}
		}
	}
	for _, p := range o.ExtraStores {
		s, prob, ok := genericStore(p)
		if !ok {
			problems = append(problems, prob)
			continue
		}
		if !seen[s.Key()] {
			seen[s.Key()] = true
			stores = append(stores, s)
		}
	}
	sortStores(stores)
	return stores, problems
}

func genericStore(p string) (Store, Problem, bool) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return Store{}, Problem{Path: p, Err: err}, false
	}
	// The directory may be reached through symlinks (resolved, so fd
	// targets match); the file itself never is.
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return Store{}, Problem{Path: abs, Err: fmt.Errorf("store directory: %w", err),
			Hint: "create the directory or fix the store path in the config file"}, false
	}
	path := filepath.Join(dir, filepath.Base(abs))
	if prob, ok := checkStoreFile(path); !ok {
		return Store{}, prob, false
	}
	id, err := lstatDirID(dir)
	if err != nil {
		return Store{}, Problem{Path: dir, Err: err, Hint: "fix the store path in the config file"}, false
	}
	return Store{Home: dir, Path: path, Kind: Generic, DirID: id}, Problem{}, true
}

func sortStores(ss []Store) {
	sort.SliceStable(ss, func(i, j int) bool {
		a, b := ss[i], ss[j]
		if a.Home != b.Home {
			return a.Home < b.Home
		}
		if (a.Profile == DefaultProfile) != (b.Profile == DefaultProfile) {
			return a.Profile == DefaultProfile
		}
		if a.Profile != b.Profile {
			return a.Profile < b.Profile
		}
		return a.Path < b.Path
	})
}
