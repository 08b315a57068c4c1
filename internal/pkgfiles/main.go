package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stateguard/stateguard/internal/manpage"
	"github.com/stateguard/stateguard/service"
)

func main() {
	agentd := flag.String("agentd", "", "the built agentd binary (required)")
	agentctl := flag.String("agentctl", "", "the built agentctl binary (required)")
	version := flag.String("version", "", "the package version, printed in the man pages (required)")
	out := flag.String("out", "", "directory to write into; created (required)")
	flag.Parse()
	if *agentd == "" || *agentctl == "" || *version == "" || *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: pkgfiles -agentd BIN -agentctl BIN -version V -out DIR  (SOURCE_DATE_EPOCH dates the man pages)")
		os.Exit(2)
	}
	date, err := sourceDate(os.Getenv("SOURCE_DATE_EPOCH"))
	if err == nil {
		err = write(context.Background(), *out, *agentd, *agentctl, *version, date)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pkgfiles: %v\n", err)
		os.Exit(1)
	}
}

// sourceDate is the reproducible-builds date: required, since a man page
// dated by the build's wall clock would make two builds differ.
func sourceDate(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, errors.New("SOURCE_DATE_EPOCH is not set (scripts/package sets it to the last commit's time)")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q is not a Unix time in seconds", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

func write(ctx context.Context, out, agentd, agentctl, version string, date time.Time) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", out, err)
	}
	unit, err := service.PackageSpec().Render()
	if err != nil {
		return err
	}
	files := map[string][]byte{
		service.UnitName: unit,
		"agent.toml":     service.DefaultConfigFile,
	}
	for _, prog := range []struct {
		bin  string
		page manpage.Page
	}{{agentd, agentdPage}, {agentctl, agentctlPage}} {
		p := prog.page
		p.Version, p.Date = version, date
		usage, err := help(ctx, prog.bin, "--help")
		if err != nil {
			return err
		}
		p.Verbs = manpage.ParseVerbs(usage)
		if len(p.Verbs) == 0 {
			return fmt.Errorf("%s --help lists no verbs; did its usage format change? (internal/manpage.ParseVerbs)\n%s", prog.bin, usage)
		}
		for i, v := range p.Verbs {
			if p.Verbs[i].Help, err = help(ctx, prog.bin, v.Name, "-h"); err != nil {
				return err
			}
		}
		gz, err := gzipped(p.Roff())
		if err != nil {
			return err
		}
		files[p.Name+".1.gz"] = gz
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// help runs one help invocation of a built binary in a fixed, empty
// environment (so nothing of the build machine leaks into the page) and
// returns what it printed. Flag packages exit 2 after -h; anything else
// non-zero means the verb did more than print its help.
func help(ctx context.Context, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LANG=C.UTF-8"}
	cmd.Dir = os.TempDir()
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		err = nil
	}
	if err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s", bin, strings.Join(args, " "), err, b.String())
	}
	if strings.TrimSpace(b.String()) == "" {
		return "", fmt.Errorf("%s %s printed no help", bin, strings.Join(args, " "))
	}
	return b.String(), nil
}

// gzipped compresses with no name and no time in the header (gzip -n),
// so the bytes depend on the page alone.
func gzipped(b []byte) ([]byte, error) {
	var out bytes.Buffer
	w, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
