package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

func exportUsage(w io.Writer, fs *flag.FlagSet) {
	printUsage(w, fs, `usage: agentctl export --session ID [--format json|md|html] [--redact] [-o FILE]
                       [--profile P] [--home H] | [--db PATH] | [--capture DIR]

Writes the session with all its messages: json keeps every column of every row
with its type (2-space indent), md is a readable transcript, html is one
self-contained page (no scripts, nothing fetched). The store is read read-only;
--capture reads a capture through a private copy, so what was salvaged can be
read before it is replayed. --redact masks API keys, bearer and basic
credentials, password=/token= values and passwords in URLs in every string.
-o never overwrites a file; without it (or with -o -) the export goes to stdout.
`, "")
}

func runExport(ctx context.Context, e *env, args []string) int {
	v := newVerb(e, "export", exportUsage)
	session := v.fs.String("session", "", "session id, exactly")
	format := v.fs.String("format", "json", "json, md or html")
	redact := v.fs.Bool("redact", false, "mask secrets in every string")
	out := v.fs.String("o", "", "write to FILE (created, never overwritten) instead of stdout")
	var sf storeFlags
	sf.register(v.fs, "Hermes profile whose store to read (default \"default\")", "path of the store (state.db) to read")
	capture := v.fs.String("capture", "", "read from this capture directory instead of a store")
	_, code, ok := v.parse(args, func(pos []string) string {
		switch {
		case len(pos) != 0:
			return fmt.Sprintf("unexpected arguments %q", pos)
		case *session == "":
			return "--session is required"
		case *format != "json" && *format != "md" && *format != "html":
			return fmt.Sprintf("--format %q: want json, md or html", *format)
		case *capture != "" && sf.named():
			return "--capture reads a capture; do not combine it with --db/--profile/--home"
		}
		return sf.mixed()
	})
	if !ok {
		return code
	}
	var x *recovery.Export
	var err error
	if *capture != "" {
		x, err = recovery.ExportCapture(ctx, expandHome(*capture, e.getenv), "", *session)
	} else {
		var s store.Store
		if s, err = sf.resolveStore(e); err == nil {
			x, err = recovery.ExportFrom(ctx, s, *session)
		}
	}
	if err != nil {
		return v.fail(err)
	}
	if *redact {
		x.Redact()
	}
	write := map[string]func(io.Writer) error{"json": x.WriteJSON, "md": x.WriteMarkdown, "html": x.WriteHTML}[*format]
	if *out == "" || *out == "-" {
		w := e.stdout
		if e.data != nil {
			w = e.data
		}
		if err := write(w); err != nil {
			return v.fail(err)
		}
		return exitOK
	}
	path := expandHome(*out, e.getenv)
	if err := writeNewFile(path, write); err != nil {
		return v.fail(err)
	}
	fmt.Fprintf(e.stderr, "exported session %s (%d messages) from %s to %s\n", x.SessionID, len(x.Messages), x.Source, path)
	return exitOK
}

// writeNewFile creates path (O_EXCL|O_NOFOLLOW, mode 0600: an export may
// hold a whole conversation) and writes it; a failed write leaves nothing.
func writeNewFile(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists: pick another name or move it away (export never overwrites)", path)
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write %s: %w", filepath.Clean(path), err)
	}
	return nil
}
