package store

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// unitCaps is the hardened system unit's capability set
// (service.Capabilities; store may not import service).
var unitCaps = []string{"sys_ptrace", "dac_read_search", "kill", "chown", "fowner", "setuid", "setgid"}

// Under the hardened unit's capabilities (no CAP_DAC_OVERRIDE), root
// cannot create a file in a user's 0700 directory, but AsOwner can, and
// the file is the user's. The child is this test binary re-run under
// setpriv with the bounding set cut to the unit's.
func TestAsOwnerUnderTheUnitsCapabilities(t *testing.T) {
	if os.Getenv("SG_ASOWNER_CHILD") != "" {
		asOwnerChild(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) is not installed")
	}
	tmp := realTemp(t)
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	home := mkdir(t, tmp, "alice")
	chown(t, home, 4250)
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	bounding := "-all"
	for _, c := range unitCaps {
		bounding += ",+" + c
	}
	cmd := exec.Command(setpriv, "--bounding-set", bounding, os.Args[0], "-test.run=^TestAsOwnerUnderTheUnitsCapabilities$", "-test.v")
	cmd.Env = append(os.Environ(), "SG_ASOWNER_CHILD="+home)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("child under the unit's capabilities: %v\n%s", err, out)
	}
	st, err := os.Lstat(filepath.Join(home, "as-owner"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := fileOwner(st); uid != 4250 {
		t.Fatalf("file made as the owner belongs to uid %d", uid)
	}
}

func asOwnerChild(t *testing.T) {
	home := os.Getenv("SG_ASOWNER_CHILD")
	// As root without CAP_DAC_OVERRIDE: refused (the known finding).
	if err := os.WriteFile(filepath.Join(home, "as-root"), nil, 0o600); !errors.Is(err, os.ErrPermission) {
		t.Fatalf("root without CAP_DAC_OVERRIDE wrote into a 0700 home: %v", err)
	}
	if err := AsOwner(4250, 4250, func() error {
		return os.WriteFile(filepath.Join(home, "as-owner"), nil, 0o600)
	}); err != nil {
		t.Fatalf("as the owner: %v", err)
	}
}
