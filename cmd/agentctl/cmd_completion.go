package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/stateguard/stateguard/internal/completion"
	"github.com/stateguard/stateguard/store"
)

// completeVerb is the hidden verb the scripts run for values only agentctl
// knows: `agentctl __complete profiles`.
const completeVerb = "__complete"

const completionSummary = "bash|zsh|fish: the shell completion script (verbs, flags, profile names)"

// runCompletion prints the completion script for a shell, built from the
// verb table and each verb's own flags.
func runCompletion(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("completion", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "usage: agentctl completion bash|zsh|fish")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Prints the shell completion script: verbs, their flags, and profile names")
		fmt.Fprintln(w, "(asked of agentctl itself as you type). Load it with, for example:")
		fmt.Fprintln(w, "  source <(agentctl completion bash)          # ~/.bashrc")
		fmt.Fprintln(w, "  agentctl completion zsh > \"${fpath[1]}/_agentctl\"")
		fmt.Fprintln(w, "  agentctl completion fish > ~/.config/fish/completions/agentctl.fish")
	}
	if e.describe != nil {
		e.describe(fs)
		return exitOK
	}
	pos, err := flagsAnywhere(fs, args)
	if err == flag.ErrHelp {
		usage(e.stdout)
		return exitOK
	}
	if err != nil || len(pos) != 1 {
		fmt.Fprintln(e.stderr, "agentctl completion: name one shell: bash, zsh or fish")
		fmt.Fprintln(e.stderr)
		usage(e.stderr)
		return exitUsage
	}
	if err := completion.Write(e.stdout, pos[0], describeProgram(ctx, e)); err != nil {
		fmt.Fprintf(e.stderr, "agentctl completion: %v\n", err)
		return exitUsage
	}
	return exitOK
}

// describeProgram runs every verb in describe mode and turns the flags
// it hands over into the completion package's description.
func describeProgram(ctx context.Context, e *env) completion.Program {
	p := completion.Program{Name: "agentctl", Dynamic: completeVerb}
	verbs := append(append([]command(nil), commands...), command{name: "completion", summary: completionSummary})
	for _, c := range verbs {
		var fs *flag.FlagSet
		de := *e
		de.stdout, de.stderr = io.Discard, io.Discard
		de.describe = func(f *flag.FlagSet) { fs = f }
		run := c.run
		if c.name == "completion" {
			run = runCompletion
		}
		run(ctx, &de, []string{"--help"}) // a verb that wants a subcommand still describes itself
		v := completion.Verb{Name: c.name, Summary: c.summary}
		if c.name == "completion" {
			v.Args = completion.Values{Kind: completion.Choice, Words: completion.Shells, Name: "shell"}
		}
		if fs != nil {
			fs.VisitAll(func(f *flag.Flag) { v.Flags = append(v.Flags, completionFlag(c.name, f)) })
		}
		p.Verbs = append(p.Verbs, v)
	}
	return p
}

// completionFlag describes one flag of verb: its value completes by what
// it names.
func completionFlag(verb string, f *flag.Flag) completion.Flag {
	cf := completion.Flag{Name: f.Name, Usage: firstLine(f.Usage), Repeat: strings.Contains(f.Usage, "(repeatable")}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return cf
	}
	choice := func(words ...string) completion.Values {
		return completion.Values{Kind: completion.Choice, Words: words, Name: f.Name}
	}
	profile := completion.Values{Kind: completion.Dynamic, Source: "profiles", Name: "profile"}
	switch {
	case f.Name == "profile", verb == "adopt" && (f.Name == "from" || f.Name == "to"):
		cf.Value = profile
	case f.Name == "home", f.Name == "state-dir", f.Name == "capture":
		cf.Value = completion.Values{Kind: completion.Dir, Name: "DIR"}
	case f.Name == "db", f.Name == "config", f.Name == "socket", f.Name == "o":
		cf.Value = completion.Values{Kind: completion.File, Name: "FILE"}
	case f.Name == "format":
		cf.Value = choice("json", "md", "html")
	case f.Name == "kind":
		cf.Value = choice("replaced", "sidecar_lost", "mispaired")
	case verb == "restore" && f.Name == "release":
		cf.Value = choice("terminate", "kill", "resume", "hold")
	default:
		name, _ := flag.UnquoteUsage(f)
		if name == "" {
			name = "value"
		}
		cf.Value = completion.Values{Kind: completion.Word, Name: name}
	}
	return cf
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// runComplete prints the values of one dynamic source, one a line:
// profiles are the profile names of every Hermes home agentctl finds for
// this user (as --profile resolves them).
func runComplete(ctx context.Context, e *env, args []string) int {
	if len(args) != 1 || args[0] != "profiles" {
		return exitUsage
	}
	homes, _ := store.DiscoverHomes(store.DiscoverOptions{Getenv: e.getenv, CurrentUserOnly: true})
	seen := map[string]bool{}
	for _, h := range homes {
		stores, _ := store.Profiles(h)
		for _, s := range stores {
			seen[s.Profile] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintln(e.stdout, n)
	}
	return exitOK
}
