package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/service"
)

func buildBinaries(t *testing.T) (agentd, agentctl string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/", "github.com/stateguard/stateguard/cmd/agentd", "github.com/stateguard/stateguard/cmd/agentctl")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "agentd"), filepath.Join(dir, "agentctl")
}

func gunzip(t *testing.T, b []byte) string {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Header.ModTime.IsZero() || r.Header.Name != "" {
		t.Errorf("gzip header carries a time %v or a name %q", r.Header.ModTime, r.Header.Name)
	}
	return string(out)
}

// TestWrite: the package files are what they claim (the packaged unit, the
// default config, a man page per binary with a section for every verb its
// help lists), and a second run writes identical bytes.
func TestWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("builds agentd and agentctl")
	}
	agentd, agentctl := buildBinaries(t)
	date := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		if err := write(context.Background(), dir, agentd, agentctl, "1.2.3", date); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{service.UnitName, "agent.toml", "agentd.1.gz", "agentctl.1.gz"}
	for _, n := range names {
		x, err := os.ReadFile(filepath.Join(a, n))
		if err != nil {
			t.Fatal(err)
		}
		y, _ := os.ReadFile(filepath.Join(b, n))
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two runs", n)
		}
	}
	unit, _ := os.ReadFile(filepath.Join(a, service.UnitName))
	if want, _ := service.PackageSpec().Render(); !bytes.Equal(unit, want) {
		t.Error("the unit is not service.PackageSpec's")
	}
	if cfg, _ := os.ReadFile(filepath.Join(a, "agent.toml")); !bytes.Equal(cfg, service.DefaultConfigFile) {
		t.Error("agent.toml is not service.DefaultConfigFile")
	}

	for _, prog := range []struct{ name, bin string }{{"agentd", agentd}, {"agentctl", agentctl}} {
		gz, _ := os.ReadFile(filepath.Join(a, prog.name+".1.gz"))
		page := gunzip(t, gz)
		usage, err := help(context.Background(), prog.bin, "--help")
		if err != nil {
			t.Fatal(err)
		}
		for _, verb := range []string{"version", "run", "status"} {
			if prog.name == "agentctl" && verb == "run" {
				verb = "replay"
			}
			if !strings.Contains(usage, "  "+verb+" ") {
				t.Fatalf("%s --help does not list %s:\n%s", prog.name, verb, usage)
			}
			if !strings.Contains(page, ".SS "+prog.name+" "+verb+"\n") {
				t.Errorf("%s.1 has no section for %s", prog.name, verb)
			}
		}
		if !strings.Contains(page, `"stateguard 1.2.3"`) || !strings.Contains(page, `"2026\-12\-01"`) {
			t.Errorf("%s.1 footer lacks the version or date:\n%.300s", prog.name, page)
		}
	}
}

// TestHelpRefusesAVerbThatDidMore: a verb that exits neither 0 nor 2 on
// -h did something other than print help; the build stops.
func TestHelpRefusesAVerbThatDidMore(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	script := filepath.Join(t.TempDir(), "fake")
	if err := os.WriteFile(script, []byte("#!"+sh+"\necho did something\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := help(context.Background(), script, "stop", "-h"); err == nil || !strings.Contains(err.Error(), "did something") {
		t.Errorf("help = %v, want an error with the output", err)
	}
}

func TestSourceDate(t *testing.T) {
	if _, err := sourceDate(""); err == nil {
		t.Error("an unset SOURCE_DATE_EPOCH accepted")
	}
	if _, err := sourceDate("yesterday"); err == nil {
		t.Error("a non-number accepted")
	}
	if d, err := sourceDate("1796117682"); err != nil || d.Unix() != 1796117682 || d.Location() != time.UTC {
		t.Errorf("sourceDate = %v, %v", d, err)
	}
}
