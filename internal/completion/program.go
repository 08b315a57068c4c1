package completion

import (
	"fmt"
	"io"
	"regexp"
	"sort"
)

// Program is what the scripts complete.
type Program struct {
	Name  string // the command, e.g. agentctl
	Verbs []Verb
	// Dynamic is the hidden verb that prints dynamic values: the script
	// runs `<Name> <Dynamic> <source>` with the command name the user
	// typed, so a binary outside $PATH completes itself.
	Dynamic string
}

// Verb is one subcommand.
type Verb struct {
	Name    string
	Summary string
	Flags   []Flag
	Args    Values // positional arguments; the zero value takes none worth completing
}

// Flag is one flag of a verb. Completion offers "--name" (or "-n" for a
// one-letter name); the program's flag parser accepts either form and
// "--name=value".
type Flag struct {
	Name   string
	Usage  string
	Value  Values // the zero value is a boolean flag: no value
	Repeat bool   // may be given more than once
}

// Kind is what a word completes to.
type Kind int

const (
	None    Kind = iota // a boolean flag, or no positional argument
	Word                // free text: nothing to offer
	File                // a file name
	Dir                 // a directory name
	Choice              // one of Words
	Dynamic             // what `<prog> <Dynamic> <Source>` prints
)

// Values describe a flag's value or a verb's arguments.
type Values struct {
	Kind   Kind
	Words  []string // Choice
	Source string   // Dynamic
	Name   string   // what the value is, for zsh's and fish's descriptions ("profile", "FILE")
}

var (
	nameRE    = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_-]*$`)
	dynamicRE = regexp.MustCompile(`^_*[a-zA-Z][a-zA-Z0-9_-]*$`)
	sourceRE  = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	wordRE    = regexp.MustCompile(`^[a-zA-Z0-9_.:/@+-]+$`)
)

// Validate refuses names the scripts could not quote safely: every
// generated word is a plain identifier, so only summaries and usages
// (quoted per shell) carry arbitrary text.
func (p Program) Validate() error {
	if !nameRE.MatchString(p.Name) {
		return fmt.Errorf("program name %q", p.Name)
	}
	if p.Dynamic != "" && !dynamicRE.MatchString(p.Dynamic) {
		return fmt.Errorf("dynamic verb %q", p.Dynamic)
	}
	seen := map[string]bool{}
	for _, v := range p.Verbs {
		if !nameRE.MatchString(v.Name) || seen[v.Name] {
			return fmt.Errorf("verb %q: not a plain name, or twice", v.Name)
		}
		seen[v.Name] = true
		if err := p.checkValues(v.Args, "verb "+v.Name+" arguments"); err != nil {
			return err
		}
		flags := map[string]bool{}
		for _, f := range v.Flags {
			if !nameRE.MatchString(f.Name) || flags[f.Name] {
				return fmt.Errorf("verb %s: flag %q: not a plain name, or twice", v.Name, f.Name)
			}
			flags[f.Name] = true
			if err := p.checkValues(f.Value, "verb "+v.Name+" flag "+f.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p Program) checkValues(vs Values, what string) error {
	switch vs.Kind {
	case Choice:
		if len(vs.Words) == 0 {
			return fmt.Errorf("%s: a choice of nothing", what)
		}
		for _, w := range vs.Words {
			if !wordRE.MatchString(w) {
				return fmt.Errorf("%s: choice %q", what, w)
			}
		}
	case Dynamic:
		if p.Dynamic == "" || !sourceRE.MatchString(vs.Source) {
			return fmt.Errorf("%s: dynamic source %q without a dynamic verb", what, vs.Source)
		}
	}
	return nil
}

// Shells are the shells Write knows.
var Shells = []string{"bash", "zsh", "fish"}

// Write writes the script for shell.
func Write(w io.Writer, shell string, p Program) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("completion for %s: %w", p.Name, err)
	}
	verbs := append([]Verb(nil), p.Verbs...)
	sort.Slice(verbs, func(i, j int) bool { return verbs[i].Name < verbs[j].Name })
	p.Verbs = verbs
	var s string
	switch shell {
	case "bash":
		s = bash(p)
	case "zsh":
		s = zsh(p)
	case "fish":
		s = fish(p)
	default:
		return fmt.Errorf("no completion for shell %q (bash, zsh, fish)", shell)
	}
	_, err := io.WriteString(w, s)
	return err
}

// flagWord is how a flag is offered: -o for one letter, --name otherwise.
func flagWord(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
