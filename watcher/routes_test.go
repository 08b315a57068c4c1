package watcher

import (
	"fmt"
	"slices"
	"testing"
)

// What every kind of path routes to, and that a store costs one entry in
// the path map (its directory's), with its three names sharing one route.
func TestRoutesMatch(t *testing.T) {
	const root = "/h"
	names := func() []string { return []string{"state.db", "state.db-wal", "state.db-shm"} }
	targets := []Target{
		{Key: root + "/state.db", Dir: root, Names: names()},
		{Key: root + "/profiles/a/state.db", Dir: root + "/profiles/a", Names: names()},
		{Key: root + "/profiles/b/state.db", Dir: root + "/profiles/b", Names: names()},
		// a store whose directory is a name that matters in its parent's
		{Key: "/odd/state.db/state.db", Dir: "/odd/state.db", Names: names()},
		{Key: "/odd/state.db", Dir: "/odd", Names: names()},
	}
	r, err := buildRoutes(targets, []Home{{Root: root}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path         string
		keys, homes  []string
		dir, anyHome bool
	}{
		{path: root + "/state.db", keys: []string{root + "/state.db"}, homes: []string{root}},
		{path: root + "/state.db-wal", keys: []string{root + "/state.db"}},
		{path: root + "/profiles/a/state.db-shm", keys: []string{root + "/profiles/a/state.db"}},
		{path: root + "/profiles/b/state.db", keys: []string{root + "/profiles/b/state.db"}},
		{path: root + "/profiles/a", keys: []string{root + "/profiles/a/state.db"}, dir: true, anyHome: true},
		{path: root + "/profiles/new", anyHome: true},
		{path: root + "/profiles", homes: []string{root}, dir: true},
		{path: root, keys: []string{root + "/state.db"}, homes: []string{root}, dir: true},
		{path: root + "/other.db"},
		{path: root + "/profiles/a/state.db-journal"},
		{path: "/odd/state.db", keys: []string{"/odd/state.db/state.db", "/odd/state.db"}, dir: true},
		{path: "/odd/state.db/state.db-wal", keys: []string{"/odd/state.db/state.db"}},
	}
	for _, c := range cases {
		rt, homes := r.match(c.path)
		if (len(homes) > 0) != c.anyHome {
			t.Errorf("%s: homes of its directory %v, want any: %v", c.path, homes, c.anyHome)
		}
		if c.keys == nil && c.homes == nil && !c.dir {
			if rt != nil {
				t.Errorf("%s: routed to %+v, want nothing", c.path, rt)
			}
			continue
		}
		if rt == nil {
			t.Errorf("%s: no route", c.path)
			continue
		}
		if !slices.Equal(rt.keys, c.keys) || !slices.Equal(rt.homes, c.homes) || rt.dir != c.dir {
			t.Errorf("%s: keys %v homes %v dir %v; want %v %v %v", c.path, rt.keys, rt.homes, rt.dir, c.keys, c.homes, c.dir)
		}
	}

	// 1,000 stores: 1,000 directories in the path map and per directory
	// one route for its three names.
	var many []Target
	for i := range 1000 {
		d := fmt.Sprintf("/m/profiles/p%04d", i)
		many = append(many, Target{Key: d + "/state.db", Dir: d, Names: names()})
	}
	r, err = buildRoutes(many, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.paths) != len(many) || len(r.dirs) != len(many) {
		t.Fatalf("%d stores: %d path entries, %d directories; want %d of each", len(many), len(r.paths), len(r.dirs), len(many))
	}
	for d, rt := range r.paths {
		if len(rt.files) != 3 || rt.files[0].rt != rt.files[1].rt || rt.files[1].rt != rt.files[2].rt {
			t.Fatalf("%s: file routes %+v, want three names sharing one", d, rt.files)
		}
	}
}
