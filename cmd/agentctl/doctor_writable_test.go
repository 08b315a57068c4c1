package main

import (
	"path/filepath"
	"reflect"
	"testing"
)

// TestDoctorWritableHomes: under ProtectSystem=strict a Hermes home
// outside every ReadWritePaths= of the unit and its drop-ins gets a
// warning with the fix; the homes drop-in that `agentd install --refresh`
// writes clears it; a drop-in of the same name in /etc hides the one in
// /usr/lib, and an empty ReadWritePaths= clears what came before.
func TestDoctorWritableHomes(t *testing.T) {
	f := newDoctorFixture(t)
	etc, lib := filepath.Join(f.base, "etc-units"), filepath.Join(f.base, "lib-units")
	f.in.unitDirs = []string{etc, lib}
	f.write(t, "lib-units/stateguard-agentd.service", "[Unit]\nReadWritePaths=/ignored\n[Service]\nProtectSystem=strict\nReadWritePaths=-/home -/root\n")
	got := f.run(t)
	expectStatus(t, got, "writable", statusWarn, f.home)
	if c := got["writable"]; c.Fix != "`sudo agentd install --refresh && sudo agentd restart` (adds where these homes live to the unit's ReadWritePaths)" {
		t.Errorf("fix = %q", c.Fix)
	}

	parent := filepath.Dir(f.home) // where the home lives: what --refresh adds
	f.write(t, "etc-units/stateguard-agentd.service.d/50-homes.conf", "# by agentd install --refresh\n[Service]\nReadWritePaths=-\""+parent+"\"\n")
	expectStatus(t, f.run(t), "writable", statusOK, "every Hermes home (1)")

	// The package's drop-in of the same name is hidden by the one in /etc.
	f.write(t, "lib-units/stateguard-agentd.service.d/50-homes.conf", "[Service]\nReadWritePaths=/nowhere\n")
	expectStatus(t, f.run(t), "writable", statusOK, "every Hermes home")
	f.write(t, "etc-units/stateguard-agentd.service.d/50-homes.conf", "[Service]\nReadWritePaths=/nowhere\n")
	expectStatus(t, f.run(t), "writable", statusWarn, f.home)

	// An admin's override that resets the list, then names the parent.
	f.write(t, "etc-units/stateguard-agentd.service.d/override.conf", "[Service]\nReadWritePaths=\nReadWritePaths="+parent+"\n")
	expectStatus(t, f.run(t), "writable", statusOK, "ReadWritePaths "+parent)
	f.write(t, "etc-units/stateguard-agentd.service.d/override.conf", "[Service]\nReadWritePaths="+parent+"\nReadWritePaths=\n")
	expectStatus(t, f.run(t), "writable", statusWarn, f.home)

	// Without ProtectSystem=strict nothing is read-only.
	f.write(t, "lib-units/stateguard-agentd.service", "[Service]\nExecStart=/usr/bin/agentd run\n")
	expectStatus(t, f.run(t), "writable", statusOK, "does not set ProtectSystem=strict")
}

// TestDoctorWritableLive: when agentd runs, its mount namespace decides,
// as the kernel will when a capture is written: a home on a read-only
// mount there warns even if the unit files cover it (the drop-in came
// after agentd started), and one on a writable mount is fine even if
// they do not (agentd was started by hand).
func TestDoctorWritableLive(t *testing.T) {
	f := newDoctorFixture(t)
	f.write(t, "units/stateguard-agentd.service", "[Service]\nProtectSystem=strict\nReadWritePaths=-"+f.base+"\n")
	mi := func(lines string) {
		f.in.agentdMountinfo = f.write(t, "agentd/mountinfo", lines)
	}
	mi("21 1 8:1 / / ro,relatime shared:1 - ext4 /dev/sda1 rw\n" +
		"30 21 8:1 " + f.base + " " + escapeMount(f.base) + " ro,relatime shared:1 - ext4 /dev/sda1 rw\n")
	got := f.run(t)
	expectStatus(t, got, "writable", statusWarn, "read-only in its mount namespace")
	if c := got["writable"]; c.Fix != "`sudo agentd restart` applies the unit's paths" {
		t.Errorf("fix = %q", c.Fix)
	}
	mi("21 1 8:1 / / ro,relatime shared:1 - ext4 /dev/sda1 rw\n" +
		"30 21 8:1 " + f.base + " " + escapeMount(f.base) + " ro,relatime shared:1 - ext4 /dev/sda1 rw\n" +
		"31 30 8:1 " + f.base + " " + escapeMount(f.base) + " rw,relatime shared:1 - ext4 /dev/sda1 rw\n")
	expectStatus(t, f.run(t), "writable", statusOK, "can write every Hermes home")

	f.write(t, "units/stateguard-agentd.service", "[Service]\nProtectSystem=strict\nReadWritePaths=-/srv\n")
	expectStatus(t, f.run(t), "writable", statusOK, "can write every Hermes home")
}

func escapeMount(s string) string {
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			out = append(out, `\040`...)
			continue
		}
		out = append(out, s[i])
	}
	return string(out)
}

func TestUnitWords(t *testing.T) {
	for in, want := range map[string][]string{
		`-/home -/root`:                {"-/home", "-/root"},
		`-"/srv/a b" '/x y'  /c\ d`:    {"-/srv/a b", "/x y", "/c d"},
		`/run%%x "/q\"uote"`:           {"/run%x", `/q"uote`},
		``:                             nil,
		`   `:                          nil,
		`-"/tmp/home s%%d$x" /plain/p`: {"-/tmp/home s%d$x", "/plain/p"},
	} {
		if got := unitWords(in); !reflect.DeepEqual(got, want) {
			t.Errorf("unitWords(%q) = %q, want %q", in, got, want)
		}
	}
	if got := unescapeMount(`/srv/a\040b\011c\134d\9`); got != "/srv/a b\tc\\d\\9" {
		t.Errorf("unescapeMount = %q", got)
	}
}
