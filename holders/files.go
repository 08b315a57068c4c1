package holders

import (
	"encoding/json"
	"fmt"

	"github.com/stateguard/stateguard/fileid"
)

// Files is what is at a store's three paths, by index in Roles: an array,
// not a map, since every store has one in every scan index and cache
// (a map of three was the largest part of an idle store's memory). It
// encodes to JSON as the object by role it always was.
type Files [3]fileid.State

// Of is what is at role r's path; the zero State (missing) for a nil
// Files or a role that is not one.
func (f *Files) Of(r Role) fileid.State {
	if f == nil {
		return fileid.State{}
	}
	if i := roleIndex(r); i >= 0 && i < len(f) {
		return f[i]
	}
	return fileid.State{}
}

// MarshalJSON writes {"main": ..., "shm": ..., "wal": ...}, in the key
// order encoding/json gave the map this was.
func (f Files) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[Role]fileid.State{RoleMain: f[0], RoleWAL: f[1], RoleSHM: f[2]})
}

// UnmarshalJSON reads what MarshalJSON writes; a role left out is missing.
func (f *Files) UnmarshalJSON(b []byte) error {
	var m map[Role]fileid.State
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("store files: %w", err)
	}
	*f = Files{}
	for r, st := range m {
		if i := roleIndex(r); i >= 0 && i < len(f) {
			f[i] = st
		}
	}
	return nil
}
