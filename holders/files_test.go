package holders

import (
	"encoding/json"
	"testing"

	"github.com/stateguard/stateguard/fileid"
)

// Files encodes as the map by role it replaced (agentctl holders --json
// keeps its shape), and decodes back.
func TestFilesJSONIsTheMapByRole(t *testing.T) {
	f := Files{
		{Exists: true, ID: fileid.ID{Dev: 1, Ino: 2}, Size: 4096, Nlink: 1, Mode: 0o600, UID: 1000, GID: 1000},
		{Exists: true, ID: fileid.ID{Dev: 1, Ino: 3}, Nlink: 1, Mode: 0o600, UID: 1000, GID: 1000},
		fileid.Missing(),
	}
	want, err := json.Marshal(map[Role]fileid.State{RoleMain: f[0], RoleWAL: f[1], RoleSHM: f[2]})
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(StoreResult{Current: &f})
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Current json.RawMessage `json:"current"`
	}
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	if string(back.Current) != string(want) {
		t.Fatalf("current encodes as\n%s\nwant\n%s", back.Current, want)
	}
	var s StoreResult
	if err := json.Unmarshal(got, &s); err != nil {
		t.Fatal(err)
	}
	if s.Current == nil || *s.Current != f || s.Current.Of(RoleSHM) != fileid.Missing() || s.Current.Of("nope") != (fileid.State{}) {
		t.Fatalf("decoded %+v, want %+v", s.Current, f)
	}
	if (*Files)(nil).Of(RoleMain).Exists {
		t.Fatal("a nil Files has a main")
	}
}
