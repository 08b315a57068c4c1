package watcher

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Target is one store to watch: the names in Dir that make up its
// generation. Dir is watched, never the files, so rename-over and unlink
// are seen; Dir need not exist yet (a profile being created).
type Target struct {
	Key   string   // the caller's id for the store, e.g. the abs path of state.db
	Dir   string   // directory holding the store files
	Names []string // base names that matter: state.db, state.db-wal, state.db-shm
}

// Home is a Hermes home: its root is watched for state.db and profiles/
// appearing, profiles/ for profiles appearing or going away, and
// profiles/.deleted/ for tombstones.
type Home struct {
	Root string
}

// The Hermes layout below a home root (docs/hermes.md).
const (
	profilesDir   = "profiles"
	tombstonesDir = ".deleted"
	homeStore     = "state.db"
)

// route says who cares about one path.
type route struct {
	keys  []string // targets notified (StoreChanged)
	homes []string // homes notified (HomeChanged)
	dir   bool     // a directory kept under watch
}

// routes is an immutable snapshot built by Set and read by the event loop
// without locks: the filter is one or two map lookups per raw event.
type routes struct {
	paths map[string]*route   // full path of a file or watched directory
	anyIn map[string][]string // directories where every entry matters to these homes
	dirs  []string            // watched directories, sorted so parents come first
}

func (r *routes) match(name string) (*route, []string) {
	rt := r.paths[name]
	var homes []string
	if i := strings.LastIndexByte(name, filepath.Separator); i > 0 {
		homes = r.anyIn[name[:i]]
	}
	return rt, homes
}

func (r *routes) at(path string) *route {
	rt := r.paths[path]
	if rt == nil {
		rt = &route{}
		r.paths[path] = rt
	}
	return rt
}

func buildRoutes(targets []Target, homes []Home) (*routes, error) {
	r := &routes{paths: map[string]*route{}, anyIn: map[string][]string{}}
	dirs := map[string]bool{}
	seen := map[string]bool{}
	for _, t := range targets {
		if t.Key == "" {
			return nil, fmt.Errorf("watch target in %s: empty key", t.Dir)
		}
		if seen[t.Key] {
			return nil, fmt.Errorf("watch target %s: key given twice", t.Key)
		}
		seen[t.Key] = true
		dir, err := absDir(t.Dir)
		if err != nil {
			return nil, fmt.Errorf("watch target %s: %w", t.Key, err)
		}
		if len(t.Names) == 0 {
			return nil, fmt.Errorf("watch target %s: no names to watch in %s", t.Key, dir)
		}
		for _, n := range t.Names {
			if n == "" || n == "." || n == ".." || strings.ContainsRune(n, filepath.Separator) {
				return nil, fmt.Errorf("watch target %s: %q is not a base name", t.Key, n)
			}
			rt := r.at(filepath.Join(dir, n))
			if !slices.Contains(rt.keys, t.Key) {
				rt.keys = append(rt.keys, t.Key)
			}
		}
		rt := r.at(dir)
		rt.dir = true
		rt.keys = append(rt.keys, t.Key)
		dirs[dir] = true
	}
	for _, h := range homes {
		root, err := absDir(h.Root)
		if err != nil {
			return nil, fmt.Errorf("watch home: %w", err)
		}
		profiles := filepath.Join(root, profilesDir)
		tombstones := filepath.Join(profiles, tombstonesDir)
		for _, d := range []string{root, profiles, tombstones} {
			rt := r.at(d)
			rt.dir = true
			if !slices.Contains(rt.homes, root) {
				rt.homes = append(rt.homes, root)
			}
			dirs[d] = true
		}
		rt := r.at(filepath.Join(root, homeStore))
		if !slices.Contains(rt.homes, root) {
			rt.homes = append(rt.homes, root)
		}
		for _, d := range []string{profiles, tombstones} {
			if !slices.Contains(r.anyIn[d], root) {
				r.anyIn[d] = append(r.anyIn[d], root)
			}
		}
	}
	for d := range dirs {
		r.dirs = append(r.dirs, d)
	}
	slices.Sort(r.dirs)
	return r, nil
}

func absDir(dir string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", dir, err)
	}
	return abs, nil
}
