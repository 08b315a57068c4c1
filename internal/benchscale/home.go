package main

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// home is one temp Hermes home of n stores.
type home struct {
	root     string // the home
	template []byte // an empty Hermes store's main file, WAL mode
	stores   []string
}

// buildHome makes n stores under dir/home: the default profile and n-1
// named ones, each a copy of one freshly created store. With dirs > n the
// home's profiles/ also gets empty profile directories up to dirs in all
// (the flood case of 100,000 directories), named to sort after the stores
// so that the stores are within max_profiles_per_home.
func buildHome(dir string, n, dirs int) (*home, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tpl := filepath.Join(dir, "template.db")
	if err := hermestest.CreateStore(tpl); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(tpl)
	if err != nil {
		return nil, fmt.Errorf("read template store: %w", err)
	}
	h := &home{root: filepath.Join(dir, "home"), template: b}
	for i := range n {
		db := filepath.Join(h.root, "state.db")
		if i > 0 {
			db = filepath.Join(h.root, "profiles", fmt.Sprintf("p%06d", i), "state.db")
		}
		if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(db, b, 0o600); err != nil {
			return nil, err
		}
		h.stores = append(h.stores, db)
	}
	if dirs > n {
		if err := emptyProfiles(filepath.Join(h.root, "profiles"), dirs-n); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// emptyProfiles makes k empty profile directories in profiles.
func emptyProfiles(profiles string, k int) error {
	if err := os.MkdirAll(profiles, 0o700); err != nil {
		return err
	}
	pd, err := unix.Open(profiles, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", profiles, err)
	}
	defer unix.Close(pd)
	for i := range k { // relative to the directory: no path walk per entry
		if err := unix.Mkdirat(pd, fmt.Sprintf("x%07d", i), 0o700); err != nil {
			return fmt.Errorf("make empty profile %d in %s: %w", i, profiles, err)
		}
	}
	return nil
}

// prepareFresh writes a fresh copy of the template next to db.
func (h *home) prepareFresh(db string) (string, error) {
	tmp := db + ".bench-new"
	return tmp, os.WriteFile(tmp, h.template, 0o600)
}

// swapIn renames tmp over db and deletes its -wal and -shm, as a backup
// restore does.
func (h *home) swapIn(tmp, db string) error {
	if err := os.Rename(tmp, db); err != nil {
		return err
	}
	for _, s := range []string{"-wal", "-shm"} {
		if err := os.Remove(db + s); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}
