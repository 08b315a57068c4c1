package recovery

import (
	"bufio"
	"fmt"
	"html/template"
	"io"
	"strings"
)

// WriteMarkdown writes the export as a readable transcript: a header
// with the session's facts, then every message under its own heading,
// tool calls and tool results in fenced blocks.
func (x *Export) WriteMarkdown(w io.Writer) error {
	v := x.view()
	bw := bufio.NewWriter(w)
	title := "Session " + inlineCode(v.SessionID)
	if v.Title != "" {
		title += " — " + oneLine(v.Title)
	}
	fmt.Fprintf(bw, "# %s\n\n", title)
	for _, m := range v.Meta {
		fmt.Fprintf(bw, "- **%s:** %s\n", m.Key, oneLine(m.Value))
	}
	if v.Source != "" {
		fmt.Fprintf(bw, "- **Exported from:** %s\n", inlineCode(v.Source))
	}
	if v.Redacted {
		fmt.Fprintf(bw, "- **Redacted:** secrets are shown as %s\n", inlineCode(Redacted))
	}
	bw.WriteString("\n")
	for _, m := range v.Messages {
		fmt.Fprintf(bw, "---\n\n### %s\n\n", m.heading())
		if m.ToolCallID != "" {
			fmt.Fprintf(bw, "Result of call %s\n\n", inlineCode(m.ToolCallID))
		}
		switch {
		case m.Role == "tool" && m.HasContent:
			fence(bw, "text", m.Content)
		case m.HasContent && strings.TrimSpace(m.Content) != "":
			bw.WriteString(strings.TrimRight(m.Content, "\n"))
			bw.WriteString("\n\n")
		case m.ToolCalls == "":
			bw.WriteString("*(no content)*\n\n")
		}
		if m.ToolCalls != "" {
			bw.WriteString("Tool calls:\n\n")
			fence(bw, "json", m.ToolCalls)
		}
		if m.Reasoning != "" {
			bw.WriteString("> **Reasoning**\n>\n")
			for _, l := range strings.Split(strings.TrimRight(m.Reasoning, "\n"), "\n") {
				fmt.Fprintf(bw, "> %s\n", l)
			}
			bw.WriteString("\n")
		}
	}
	return bw.Flush()
}

// fence writes s in a fenced block whose fence is longer than any run of
// backticks inside it, so no content can close it early.
func fence(w *bufio.Writer, lang, s string) {
	longest, run := 0, 0
	for _, r := range s {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	f := strings.Repeat("`", max(3, longest+1))
	fmt.Fprintf(w, "%s%s\n%s\n%s\n\n", f, lang, strings.TrimRight(s, "\n"), f)
}

func inlineCode(s string) string {
	s = oneLine(s)
	n := 1
	for strings.Contains(s, strings.Repeat("`", n)) {
		n++
	}
	f := strings.Repeat("`", n)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		return f + " " + s + " " + f
	}
	return f + s + f
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// WriteHTML writes the export as one self-contained page: styles inline,
// no scripts, no external resource of any kind (a Content-Security-Policy
// of default-src 'none' says so to the browser too), readable in any
// browser and as plain HTML without CSS.
func (x *Export) WriteHTML(w io.Writer) error {
	return exportPage.Execute(w, x.view())
}

var exportPage = template.Must(template.New("export").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>Session {{.SessionID}}{{if .Title}} — {{.Title}}{{end}}</title>
<style>
body { margin: 0; background: #f6f6f4; color: #1d1d1f; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; }
main { max-width: 52rem; margin: 0 auto; padding: 1.5rem 1rem 3rem; }
h1 { font-size: 1.4rem; margin: 0 0 .75rem; overflow-wrap: anywhere; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem; margin: 0 0 1.5rem; padding: .75rem 1rem; background: #fff; border: 1px solid #ddd; border-radius: 6px; }
dl.meta dt { font-weight: 600; color: #555; }
dl.meta dd { margin: 0; overflow-wrap: anywhere; }
ol.messages { list-style: none; margin: 0; padding: 0; }
li.msg { margin: 0 0 .9rem; padding: .6rem .9rem; background: #fff; border: 1px solid #ddd; border-left: 4px solid #999; border-radius: 6px; }
li.role-user { border-left-color: #2b6cb0; }
li.role-assistant { border-left-color: #2f855a; }
li.role-tool { border-left-color: #b7791f; background: #fffdf7; }
li.role-system { border-left-color: #6b46c1; }
.head { font-size: .85rem; color: #555; margin-bottom: .35rem; }
.head .role { font-weight: 700; color: #1d1d1f; text-transform: uppercase; letter-spacing: .03em; }
.flag { display: inline-block; margin-left: .4rem; padding: 0 .4rem; border-radius: 3px; background: #eee; font-size: .75rem; }
pre { margin: .3rem 0; white-space: pre-wrap; overflow-wrap: anywhere; font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.content { font: inherit; }
pre.code { background: #f3f3f0; padding: .5rem .6rem; border-radius: 4px; }
details { margin-top: .3rem; }
summary { cursor: pointer; color: #555; font-size: .85rem; }
.empty { color: #888; font-style: italic; }
footer { margin-top: 2rem; color: #777; font-size: .8rem; }
</style>
</head>
<body>
<main>
<h1>Session {{.SessionID}}{{if .Title}} — {{.Title}}{{end}}</h1>
<dl class="meta">
{{- range .Meta}}
<dt>{{.Key}}</dt><dd>{{.Value}}</dd>
{{- end}}
{{- if .Source}}
<dt>Exported from</dt><dd><code>{{.Source}}</code></dd>
{{- end}}
{{- if .Redacted}}
<dt>Redacted</dt><dd>secrets are shown as <code>[REDACTED]</code></dd>
{{- end}}
</dl>
<ol class="messages">
{{- range .Messages}}
<li class="msg {{.RoleClass}}" id="m{{.N}}">
<div class="head"><span class="role">{{.Role}}</span> #{{.N}}{{if .ToolName}} · tool <code>{{.ToolName}}</code>{{end}}{{if .When}} · <time>{{.When}}</time>{{end}}{{range .Flags}}<span class="flag">{{.}}</span>{{end}}</div>
{{- if .ToolCallID}}
<div class="head">result of call <code>{{.ToolCallID}}</code></div>
{{- end}}
{{- if .HasContent}}
<pre class="{{if eq .Role "tool"}}code{{else}}content{{end}}">{{.Content}}</pre>
{{- else if not .ToolCalls}}
<p class="empty">(no content)</p>
{{- end}}
{{- if .ToolCalls}}
<details open><summary>Tool calls</summary><pre class="code">{{.ToolCalls}}</pre></details>
{{- end}}
{{- if .Reasoning}}
<details><summary>Reasoning</summary><pre class="content">{{.Reasoning}}</pre></details>
{{- end}}
</li>
{{- end}}
</ol>
<footer>Exported by stateguard. {{len .Messages}} messages.</footer>
</main>
</body>
</html>
`))
