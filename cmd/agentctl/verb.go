package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/stateguard/stateguard/store"
)

// verb is one run of an agentctl verb: its flags, and how it reports a
// mistake in them or a failure, every message headed "agentctl <verb>:".
type verb struct {
	e     *env
	fs    *flag.FlagSet
	usage func(io.Writer, *flag.FlagSet)
}

func newVerb(e *env, name string, usage func(io.Writer, *flag.FlagSet)) *verb {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &verb{e: e, fs: fs, usage: usage}
}

// parse parses the flags anywhere among args and asks check (nil: no
// check) what is wrong with the positional arguments and the flags' values,
// "" for nothing. It returns the positional arguments, or ok false with
// the exit code: 0 after printing the usage for -h, 2 after printing the
// mistake and the usage.
func (v *verb) parse(args []string, check func(pos []string) string) (pos []string, code int, ok bool) {
	if v.e.describe != nil {
		v.e.describe(v.fs)
		return nil, exitOK, false
	}
	pos, err := flagsAnywhere(v.fs, args)
	if errors.Is(err, flag.ErrHelp) {
		v.printUsage(v.e.stdout)
		return nil, exitOK, false
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	} else if check != nil {
		msg = check(pos)
	}
	if msg != "" {
		return nil, v.usageError(msg), false
	}
	return pos, exitOK, true
}

// parseN is parse wanting exactly n positional arguments.
func (v *verb) parseN(args []string, n int) ([]string, int, bool) {
	return v.parse(args, func(pos []string) string {
		switch {
		case len(pos) > n:
			return fmt.Sprintf("unexpected argument %q", pos[n])
		case len(pos) < n:
			return "missing argument"
		}
		return ""
	})
}

// usageError prints a mistake in the command line and the usage, and
// returns the usage exit code.
func (v *verb) usageError(msg string) int {
	fmt.Fprintf(v.e.stderr, "agentctl %s: %s\n\n", v.fs.Name(), msg)
	v.printUsage(v.e.stderr)
	return exitUsage
}

// printUsage prints the verb's usage with its flag list to w. The flag set
// is silent while parsing (its errors are worded by parse), so it must be
// pointed at w for PrintDefaults to print anything.
func (v *verb) printUsage(w io.Writer) {
	v.fs.SetOutput(w)
	defer v.fs.SetOutput(io.Discard)
	v.usage(w, v.fs)
}

// fail prints err and returns the error exit code.
func (v *verb) fail(err error) int {
	fmt.Fprintf(v.e.stderr, "agentctl %s: %v\n", v.fs.Name(), err)
	return exitError
}

// printJSON writes x to stdout as indented JSON: exitOK, or exitError
// after saying why it could not.
func (v *verb) printJSON(x any) int {
	if err := writeJSON(v.e.stdout, x); err != nil {
		return v.fail(err)
	}
	return exitOK
}

// flagsAnywhere parses flags before, between and after positional
// arguments ("release ID --kill", "replay PATH --session-id X" as the
// usage shows them) and returns the positional ones; "--" ends the flags.
func flagsAnywhere(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// Parse consumes a "--" terminator: what follows is positional.
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// storeFlags name the store a verb works on: --db, else --profile of
// --home, resolved by Hermes' rules (replayStore).
type storeFlags struct {
	profile, home, db string
}

// register adds --profile, --home and --db with the verb's own words for
// the first and the last.
func (s *storeFlags) register(fs *flag.FlagSet, profileHelp, dbHelp string) {
	fs.StringVar(&s.profile, "profile", "", profileHelp)
	fs.StringVar(&s.home, "home", "", "Hermes home (default $HERMES_HOME, else ~/.hermes)")
	fs.StringVar(&s.db, "db", "", dbHelp)
}

// named reports whether any of the three was given.
func (s *storeFlags) named() bool { return s.db != "" || s.profile != "" || s.home != "" }

// mixed is the usage mistake of naming the store twice, or "".
func (s *storeFlags) mixed() string {
	if s.db != "" && (s.profile != "" || s.home != "") {
		return "--db names the store; do not combine it with --profile/--home"
	}
	return ""
}

func (s *storeFlags) resolve(e *env) (string, error) {
	return replayStore(e, s.db, s.profile, s.home)
}

// resolveStore is resolve with the store's directory recorded, for verbs
// that open the store through its directory's handle.
func (s *storeFlags) resolveStore(e *env) (store.Store, error) {
	return resolveStoreOf(e, s.db, s.profile, s.home)
}

// printUsage prints a verb's help: what it does, its flags and, when
// there are any to add, its exit codes, a blank line between each.
func printUsage(w io.Writer, fs *flag.FlagSet, about, exits string) {
	fmt.Fprintln(w, about)
	fs.PrintDefaults()
	if exits != "" {
		fmt.Fprintln(w)
		fmt.Fprint(w, exits)
	}
}
