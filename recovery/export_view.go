package recovery

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// exportView is what the md and html forms show: the same facts, read
// once from the rows.
type exportView struct {
	SessionID string
	Title     string
	Source    string
	Redacted  bool
	Meta      []metaItem
	Messages  []messageView
}

type metaItem struct{ Key, Value string }

type messageView struct {
	N          int
	ID         int64
	Role       string
	RoleClass  string // a CSS class: role-user, role-assistant, role-tool, role-other
	When       string
	Flags      []string // inactive, compacted, compressed summary, finish reason
	Content    string
	HasContent bool
	ToolCalls  string // indented JSON (or the raw text when it is not JSON)
	ToolCallID string
	ToolName   string
	Reasoning  string
}

func (x *Export) view() exportView {
	v := exportView{SessionID: x.SessionID, Source: x.Source, Redacted: x.Redacted}
	if s := x.Session; s != nil {
		v.Title, _ = s.Text("title")
		add := func(key, val string) {
			if val != "" {
				v.Meta = append(v.Meta, metaItem{key, val})
			}
		}
		text := func(col string) string { t, _ := s.Text(col); return t }
		add("Source", text("source"))
		add("Model", text("model"))
		add("Profile", text("profile_name"))
		if f, ok := s.Float("started_at"); ok {
			add("Started", unixTime(f))
		}
		if f, ok := s.Float("ended_at"); ok {
			end := unixTime(f)
			if r := text("end_reason"); r != "" {
				end += " (" + r + ")"
			}
			add("Ended", end)
		}
		add("Parent session", text("parent_session_id"))
		if n, ok := s.Int("archived"); ok && n != 0 {
			add("Archived", "yes")
		}
	} else {
		v.Meta = append(v.Meta, metaItem{"Session row", "missing: only its messages are here"})
	}
	v.Meta = append(v.Meta, metaItem{"Messages", strconv.Itoa(len(x.Messages))})
	for i, m := range x.Messages {
		v.Messages = append(v.Messages, messageOf(i+1, m))
	}
	return v
}

func messageOf(n int, m Row) messageView {
	mv := messageView{N: n}
	mv.ID, _ = m.Int("id")
	mv.Role, _ = m.Text("role")
	switch mv.Role {
	case "user", "assistant", "tool", "system":
		mv.RoleClass = "role-" + mv.Role
	default:
		mv.RoleClass = "role-other"
	}
	if f, ok := m.Float("timestamp"); ok {
		mv.When = unixTime(f)
	}
	if a, ok := m.Int("active"); ok && a == 0 {
		mv.Flags = append(mv.Flags, "inactive")
	}
	if c, ok := m.Int("compacted"); ok && c != 0 {
		mv.Flags = append(mv.Flags, "compacted")
	}
	if c, ok := m.Int("_compressed_summary"); ok && c != 0 {
		mv.Flags = append(mv.Flags, "compressed summary")
	}
	if fr, _ := m.Text("finish_reason"); fr != "" {
		mv.Flags = append(mv.Flags, "finish: "+fr)
	}
	mv.Content, mv.HasContent = m.Text("content")
	if tc, ok := m.Text("tool_calls"); ok && strings.TrimSpace(tc) != "" && strings.TrimSpace(tc) != "null" {
		mv.ToolCalls = indentJSON(tc)
	}
	mv.ToolCallID, _ = m.Text("tool_call_id")
	mv.ToolName, _ = m.Text("tool_name")
	var rs []string
	for _, col := range []string{"reasoning", "reasoning_content"} {
		if t, _ := m.Text(col); strings.TrimSpace(t) != "" && !containsString(rs, t) {
			rs = append(rs, t)
		}
	}
	mv.Reasoning = strings.Join(rs, "\n\n")
	return mv
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func indentJSON(s string) string {
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(s), "", "  "); err != nil {
		return s
	}
	return b.String()
}

// unixTime shows Unix seconds as UTC to the second.
func unixTime(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > 1e13 {
		return fmt.Sprint(f)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC().Format("2006-01-02 15:04:05 UTC")
}

// heading is a message's one-line header: number, role, tool, time, flags.
func (m messageView) heading() string {
	parts := []string{fmt.Sprintf("%d", m.N), m.Role}
	if m.ToolName != "" {
		parts = append(parts, "tool "+m.ToolName)
	}
	if m.When != "" {
		parts = append(parts, m.When)
	}
	parts = append(parts, m.Flags...)
	return strings.Join(parts, " · ")
}
