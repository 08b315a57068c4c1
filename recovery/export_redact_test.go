//go:build linux

package recovery

import (
	"context"
	"strings"
	"testing"
)

// Each kind of secret is masked, and the text around it stays exactly as
// it was; look-alikes that are not secrets are not touched.
func TestRedactString(t *testing.T) {
	cases := []struct{ in, want string }{
		// API keys by provider prefix.
		{"key sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOp end", "key [REDACTED] end"},
		{"anthropic=sk-ant-api03-AAAAbbbbCCCCdddd1234-_x.", "anthropic=[REDACTED]."},
		{"or: sk-or-v1-0123456789abcdef0123456789", "or: [REDACTED]"},
		{"google AIzaSyA1234567890abcdefghijklmnopqrstuv!", "google [REDACTED]!"},
		{"gh ghp_0123456789abcdefghijABCDEFGHIJ012345 done", "gh [REDACTED] done"},
		{"pat github_pat_11ABCDEFG0123456789_abcdefXYZ", "pat [REDACTED]"},
		{"slack xoxb-1234567890-abcdefghij", "slack [REDACTED]"},
		{"aws AKIAIOSFODNN7EXAMPLE,", "aws [REDACTED],"},
		{"stripe sk_live_0123456789abcdefABCD", "stripe [REDACTED]"},
		{"hf hf_abcdefghijklmnopqrstuvwxyz012345", "hf [REDACTED]"},
		{"groq gsk_ABCDEFGHIJKLMNOPQRSTuv", "groq [REDACTED]"},
		{"tavily tvly-dev-ABCDEFGHIJKLMNOPQRST", "tavily [REDACTED]"},
		{"jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok", "jwt [REDACTED] ok"},
		// Bearer and basic credentials.
		{"Authorization: Bearer abc.def-123_XYZ", "Authorization: Bearer [REDACTED]"},
		{"curl -H 'authorization: bearer 0123456789abcdef'", "curl -H 'authorization: bearer [REDACTED]'"},
		{"Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic [REDACTED]"},
		// password= / token= values, in any key=value and as JSON members.
		{"login password=hunter2 now", "login password=[REDACTED] now"},
		{"https://api.example.com/v1?token=abc123&page=2", "https://api.example.com/v1?token=[REDACTED]&page=2"},
		{"export API_KEY=xyz789; echo", "export API_KEY=[REDACTED]; echo"},
		{`db password = "correct horse"`, `db password = "[REDACTED]"`},
		{`{"user": "ann", "password": "s3cr\"et", "n": 1}`, `{"user": "ann", "password": "[REDACTED]", "n": 1}`},
		{`{\"client_secret\": \"abc\"}`, `{\"client_secret\": \"[REDACTED]\"}`},
		// Credentials in URLs.
		{"clone https://alice:pa55word@git.example.com/repo.git", "clone https://alice:[REDACTED]@git.example.com/repo.git"},
		{"postgres://app:Sup3r$ecret@db:5432/main", "postgres://app:[REDACTED]@db:5432/main"},
	}
	for _, tc := range cases {
		if got := RedactString(tc.in); got != tc.want {
			t.Errorf("RedactString(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
	untouched := []string{
		"max_tokens=512 and tokens=3 and token_count: 7",
		"the task-force met; ask-me-anything",
		"the bearer of bad news",
		"ssh://git@github.com/org/repo.git",
		"https://example.com/guide?page=2#token",
		"the password field is empty",
		"sk-short and AKIA-not-a-key",
		`{"tokens": 5, "password_hint": "pet"}`,
		"Basic idea: keep it simple",
	}
	for _, s := range untouched {
		if got := RedactString(s); got != s {
			t.Errorf("RedactString(%q) = %q, want it unchanged", s, got)
		}
	}
}

// --redact covers every string of every message and the session row, in
// every format: the planted secrets are gone, the rest is as before.
func TestExportRedacted(t *testing.T) {
	s, _ := exportFixture(t)
	s.session("s-secret", "cli", 1759303488.0, "title", "deploy with token=T0pS3cret")
	s.add("s-secret", "user", "my key is sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOp, keep it safe", 1759303489.0)
	s.add("s-secret", "assistant", nil, 1759303490.0, "reasoning", "they pasted Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig_nature_0123",
		"tool_calls", `[{"id":"c1","type":"function","function":{"name":"login","arguments":"{\"user\": \"ann\", \"password\": \"hunter2\"}"}}]`)
	s.add("s-secret", "tool", "cloned https://ann:pa55word@git.example.com/x.git", 1759303491.0,
		"tool_call_id", "c1", "tool_name", "login", "api_content", "GET /x?access_token=zzz999", "display_metadata", `{"password": "meta-secret"}`)
	x, err := ReadExport(context.Background(), s.db, "s-secret")
	noErr(t, err)
	x.Source = "state.db"
	x.Redact()
	secrets := []string{"T0pS3cret", "sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOp", "eyJhbGciOiJIUzI1NiJ9", "sig_nature_0123", "hunter2", "pa55word", "zzz999", "meta-secret"}
	for _, f := range []string{"json", "md", "html"} {
		out := string(renderExport(t, x, f))
		for _, sec := range secrets {
			if strings.Contains(out, sec) {
				t.Errorf("%s export still holds %q", f, sec)
			}
		}
		for _, kept := range []string{"my key is", "keep it safe", "they pasted Bearer", "cloned https://ann:", "git.example.com/x.git", "deploy with token="} {
			if !strings.Contains(out, kept) {
				t.Errorf("%s export lost %q", f, kept)
			}
		}
		golden(t, "redacted/session."+f, []byte(out))
	}
	// Nothing but the secrets changed: the other session's export is the
	// same redacted or not.
	plain := readFixtureExport(t, s)
	red := readFixtureExport(t, s)
	red.Redact()
	red.Redacted = false
	if a, b := string(renderExport(t, plain, "json")), string(renderExport(t, red, "json")); a != b {
		t.Error("redacting a session without secrets changed it")
	}
}
