package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// home is one temp Hermes home of n stores.
type home struct {
	root     string // the home
	template []byte // an empty Hermes store's main file, WAL mode
	stores   []string
}

// buildHome makes n stores under dir/home: the default profile and n-1
// named ones, each a copy of one freshly created store.
func buildHome(dir string, n int) (*home, error) {
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
	return h, nil
}

// renameFreshOver replaces db with a fresh copy of the template by
// rename(2) and deletes its -wal and -shm, as a backup restore does.
func (h *home) renameFreshOver(db string) error {
	tmp := db + ".bench-new"
	if err := os.WriteFile(tmp, h.template, 0o600); err != nil {
		return err
	}
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
