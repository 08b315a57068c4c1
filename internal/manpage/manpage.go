package manpage

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
	"time"
)

// Verb is one subcommand: its one-line summary from the program's usage
// and the full text its -h prints.
type Verb struct {
	Name, Summary, Help string
}

// Page is one man page. Section 1 unless set.
type Page struct {
	Name    string // program name, e.g. agentd
	Section string
	Version string    // printed in the footer
	Date    time.Time // the footer's date; SOURCE_DATE_EPOCH for reproducible builds
	Summary string    // the NAME line after the dash
	// Description is prose, one paragraph per blank-line-separated block.
	Description string
	Verbs       []Verb
	ExitStatus  string // prose, like Description
	Files       [][2]string
	SeeAlso     []string // "agentctl(1)"
}

// ParseVerbs reads the verb list of a usage text of the form the binaries
// print:
//
//	usage: agentd <verb> [flags]
//
//	  install    install agentd as a service ...
//	  run        run the agent in the foreground
//
// Lines indented by two spaces, a name and then the summary; anything
// else (the usage line, blank lines, a trailing note) is skipped.
func ParseVerbs(usage string) []Verb {
	var out []Verb
	sc := bufio.NewScanner(strings.NewReader(usage))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") {
			continue
		}
		name, summary, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || name == "" || strings.HasPrefix(name, "-") {
			continue
		}
		out = append(out, Verb{Name: name, Summary: strings.TrimSpace(summary)})
	}
	return out
}

// Roff renders the page.
func (p Page) Roff() []byte {
	sec := p.Section
	if sec == "" {
		sec = "1"
	}
	var b bytes.Buffer
	upper := strings.ToUpper(p.Name)
	fmt.Fprintf(&b, ".\\\" Generated from %s's help text; do not edit.\n", p.Name)
	fmt.Fprintf(&b, ".TH %s %s %s %s %s\n", quote(upper), sec, quote(p.Date.UTC().Format("2006-01-02")),
		quote("stateguard "+p.Version), quote("stateguard manual"))
	// No hyphenation and a ragged right edge: file names, flags and unit
	// names must stay whole to be copied.
	b.WriteString(".nh\n.ad l\n")
	b.WriteString(".SH NAME\n")
	fmt.Fprintf(&b, "%s \\- %s\n", escape(p.Name), escape(p.Summary))
	b.WriteString(".SH SYNOPSIS\n")
	fmt.Fprintf(&b, ".B %s\n.I verb\n.RI [ flags ]\n", escape(p.Name))
	if p.Description != "" {
		b.WriteString(".SH DESCRIPTION\n")
		paragraphs(&b, p.Description)
	}
	if len(p.Verbs) > 0 {
		b.WriteString(".SH COMMANDS\n")
		for _, v := range p.Verbs {
			fmt.Fprintf(&b, ".SS %s\n", escape(p.Name+" "+v.Name))
			if v.Summary != "" {
				fmt.Fprintf(&b, "%s\n", line(v.Summary))
			}
			if h := strings.TrimRight(v.Help, "\n "); h != "" {
				preformatted(&b, h)
			}
		}
	}
	if p.ExitStatus != "" {
		b.WriteString(".SH EXIT STATUS\n")
		paragraphs(&b, p.ExitStatus)
	}
	if len(p.Files) > 0 {
		b.WriteString(".SH FILES\n")
		for _, f := range p.Files {
			fmt.Fprintf(&b, ".TP\n.I %s\n%s\n", escape(f[0]), line(f[1]))
		}
	}
	if len(p.SeeAlso) > 0 {
		b.WriteString(".SH SEE ALSO\n")
		var refs []string
		for _, s := range p.SeeAlso {
			name, sect, ok := strings.Cut(strings.TrimSuffix(s, ")"), "(")
			if ok {
				refs = append(refs, fmt.Sprintf(".BR %s (%s)", escape(name), escape(sect)))
			} else {
				refs = append(refs, line(s))
			}
		}
		for i, r := range refs {
			if i < len(refs)-1 && strings.HasPrefix(r, ".BR") {
				r += " ,"
			}
			b.WriteString(r + "\n")
		}
	}
	return b.Bytes()
}

func paragraphs(b *bytes.Buffer, text string) {
	for i, p := range strings.Split(strings.TrimSpace(text), "\n\n") {
		if i > 0 {
			b.WriteString(".PP\n")
		}
		for _, l := range strings.Split(p, "\n") {
			b.WriteString(line(strings.TrimSpace(l)) + "\n")
		}
	}
}

// preformatted keeps the help text's own layout: no filling, no
// adjusting, every line as the binary prints it.
func preformatted(b *bytes.Buffer, text string) {
	b.WriteString(".PP\n.RS 4\n.nf\n")
	for _, l := range strings.Split(text, "\n") {
		// The flag package indents a flag's description with a tab.
		b.WriteString(line(strings.ReplaceAll(l, "\t", "  ")) + "\n")
	}
	b.WriteString(".fi\n.RE\n")
}

// line escapes one text line: a leading . or ' would be a request.
func line(s string) string {
	s = escape(s)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// escape makes s literal roff text. Backslashes first; a hyphen becomes
// \- so flags stay ASCII hyphen-minus when copied from the rendered page.
func escape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	return strings.ReplaceAll(s, "-", `\-`)
}

func quote(s string) string {
	return `"` + strings.ReplaceAll(escape(s), `"`, `\(dq`) + `"`
}
