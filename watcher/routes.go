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
	// files are a directory's names that matter, each with its route:
	// the file routes live in their directory's, not in routes.paths, so
	// a store costs one entry there and no path string per file; names
	// with the same keys and homes share one route.
	files []fileRoute
}

// fileRoute is one name in a watched directory and who cares about it.
type fileRoute struct {
	name string
	rt   *route
}

// file is the route of name in directory route d, made if need be; only
// while building.
func (d *route) file(name string) *route {
	for _, f := range d.files {
		if f.name == name {
			return f.rt
		}
	}
	rt := &route{}
	d.files = append(d.files, fileRoute{name: name, rt: rt})
	return rt
}

// routes is an immutable snapshot built by Set and read by the event loop
// without locks: the filter is one or two map lookups per raw event.
type routes struct {
	paths map[string]*route   // every watched directory (their files' routes are in theirs)
	anyIn map[string][]string // directories where every entry matters to these homes
	dirs  []string            // watched directories, sorted so parents come first
}

func (r *routes) match(name string) (*route, []string) {
	rt := r.paths[name]
	var homes []string
	if i := strings.LastIndexByte(name, filepath.Separator); i > 0 {
		homes = r.anyIn[name[:i]]
		if d := r.paths[name[:i]]; rt == nil && d != nil {
			base := name[i+1:]
			for _, f := range d.files {
				if f.name == base {
					rt = f.rt
					break
				}
			}
		}
	}
	return rt, homes
}

// dir is the route of a watched directory, made if need be; only while
// building.
func (r *routes) dir(path string) *route {
	rt := r.paths[path]
	if rt == nil {
		rt = &route{dir: true}
		r.paths[path] = rt
	}
	return rt
}

func buildRoutes(targets []Target, homes []Home) (*routes, error) {
	r := &routes{paths: map[string]*route{}, anyIn: map[string][]string{}}
	seen := map[string]bool{}
	names := map[string]string{} // one copy of each name (10,000 "state.db-wal")
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
		d := r.dir(dir)
		for _, n := range t.Names {
			if n == "" || n == "." || n == ".." || strings.ContainsRune(n, filepath.Separator) {
				return nil, fmt.Errorf("watch target %s: %q is not a base name", t.Key, n)
			}
			if in, ok := names[n]; ok {
				n = in
			} else {
				names[n] = n
			}
			rt := d.file(n)
			if !slices.Contains(rt.keys, t.Key) {
				rt.keys = append(rt.keys, t.Key)
			}
		}
		d.keys = append(d.keys, t.Key)
	}
	for _, h := range homes {
		root, err := absDir(h.Root)
		if err != nil {
			return nil, fmt.Errorf("watch home: %w", err)
		}
		profiles := filepath.Join(root, profilesDir)
		tombstones := filepath.Join(profiles, tombstonesDir)
		for _, d := range []string{root, profiles, tombstones} {
			rt := r.dir(d)
			if !slices.Contains(rt.homes, root) {
				rt.homes = append(rt.homes, root)
			}
		}
		rt := r.dir(root).file(homeStore)
		if !slices.Contains(rt.homes, root) {
			rt.homes = append(rt.homes, root)
		}
		for _, d := range []string{profiles, tombstones} {
			if !slices.Contains(r.anyIn[d], root) {
				r.anyIn[d] = append(r.anyIn[d], root)
			}
		}
	}
	for d, rt := range r.paths {
		r.dirs = append(r.dirs, d)
		// A watched directory that is also a name that matters in its
		// parent: both kinds of event reach both.
		if p := r.paths[filepath.Dir(d)]; p != nil && p != rt {
			for _, f := range p.files {
				if f.name == filepath.Base(d) {
					rt.keys = appendNew(rt.keys, f.rt.keys...)
					rt.homes = appendNew(rt.homes, f.rt.homes...)
				}
			}
		}
	}
	slices.Sort(r.dirs)
	for _, rt := range r.paths {
		shareFileRoutes(rt.files)
	}
	return r, nil
}

// shareFileRoutes points the names of one directory whose routes say the
// same at one route.
func shareFileRoutes(fs []fileRoute) {
	for i := range fs {
		for j := range i {
			if a, b := fs[j].rt, fs[i].rt; slices.Equal(a.keys, b.keys) && slices.Equal(a.homes, b.homes) {
				fs[i].rt = a
				break
			}
		}
	}
}

// appendNew appends the elements of add not in s.
func appendNew(s []string, add ...string) []string {
	for _, x := range add {
		if !slices.Contains(s, x) {
			s = append(s, x)
		}
	}
	return s
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
