package recovery

import (
	"regexp"
	"strings"
)

// Redacted replaces every secret Redact finds.
const Redacted = "[REDACTED]"

// secretKeys are the names whose values are secrets in key=value and
// "key": "value" form. Matched as whole words, so max_tokens=5 or
// tokens=3 stay as they are.
const secretKeys = `password|passwd|token|access_token|refresh_token|id_token|auth_token|api_key|apikey|api-key|secret|client_secret`

var (
	// scheme://user:password@host: the password goes, the user stays.
	urlCredentials = regexp.MustCompile(`\b([a-zA-Z][a-zA-Z0-9+.-]*://[^\s/?#@:]+:)([^\s/?#@]+)@`)
	// "password": "hunter2" in JSON (tool call arguments).
	jsonSecret = regexp.MustCompile(`(?i)("(?:` + secretKeys + `)"\s*:\s*")((?:[^"\\]|\\.)+)(")`)
	// The same inside a JSON string: tool call arguments are JSON text
	// held in a JSON string, {"arguments": "{\"password\": \"x\"}"}.
	escapedJSONSecret = regexp.MustCompile(`(?i)(\\"(?:` + secretKeys + `)\\"\s*:\s*\\")((?:[^\\"]|\\[^"])+)(\\")`)
	// password=hunter2, ?token=abc&..., api_key = xyz.
	kvSecret = regexp.MustCompile(`(?i)\b((?:` + secretKeys + `)\s*=\s*)("[^"]*"|'[^']*'|[^\s&;,"'<>()\[\]{}]+)`)
	// Authorization: Bearer <token>, Authorization: Basic <base64>.
	bearer     = regexp.MustCompile(`(?i)\b(bearer\s+)([A-Za-z0-9\-._~+/]+=*)`)
	basicAuth  = regexp.MustCompile(`(?i)(authorization\s*:\s*basic\s+)([A-Za-z0-9+/]+=*)`)
	providerAK = regexp.MustCompile(`\b(?:` + strings.Join([]string{
		`sk-[A-Za-z0-9_-]{20,}`,                       // OpenAI, Anthropic (sk-ant-), OpenRouter (sk-or-), DeepSeek
		`(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}`, // Stripe
		`AIza[0-9A-Za-z_-]{35}`,                       // Google API keys
		`ya29\.[0-9A-Za-z_-]{20,}`,                    // Google OAuth access tokens
		`gh[pousr]_[A-Za-z0-9]{36,}`,                  // GitHub tokens
		`github_pat_[A-Za-z0-9_]{22,}`,                // GitHub fine-grained tokens
		`glpat-[A-Za-z0-9_-]{20,}`,                    // GitLab
		`xox[abprs]-[A-Za-z0-9-]{10,}`,                // Slack
		`(?:AKIA|ASIA)[0-9A-Z]{16}`,                   // AWS access key ids
		`hf_[A-Za-z0-9]{30,}`,                         // Hugging Face
		`gsk_[A-Za-z0-9]{20,}`,                        // Groq
		`xai-[A-Za-z0-9]{20,}`,                        // xAI
		`pplx-[A-Za-z0-9]{20,}`,                       // Perplexity
		`r8_[A-Za-z0-9]{20,}`,                         // Replicate
		`nvapi-[A-Za-z0-9_-]{20,}`,                    // NVIDIA
		`tvly-[A-Za-z0-9_-]{20,}`,                     // Tavily
		`fc-[0-9a-f]{32}`,                             // Firecrawl
		`eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}`, // JWTs
	}, "|") + `)`)
)

// RedactString masks the secrets in s: API keys with a known provider
// prefix, bearer and basic credentials, values of password=, token= and
// the like (also as JSON members), and passwords in URLs. Everything
// else is left exactly as it was.
func RedactString(s string) string {
	s = urlCredentials.ReplaceAllString(s, "${1}"+Redacted+"@")
	s = jsonSecret.ReplaceAllString(s, "${1}"+Redacted+"${3}")
	s = escapedJSONSecret.ReplaceAllString(s, "${1}"+Redacted+"${3}")
	s = kvSecret.ReplaceAllStringFunc(s, func(m string) string {
		sub := kvSecret.FindStringSubmatch(m)
		if v := sub[2]; len(v) >= 2 && (v[0] == '"' || v[0] == '\'') {
			return sub[1] + v[:1] + Redacted + v[:1] // keep the quotes
		}
		return sub[1] + Redacted
	})
	s = basicAuth.ReplaceAllString(s, "${1}"+Redacted)
	s = bearer.ReplaceAllStringFunc(s, func(m string) string {
		sub := bearer.FindStringSubmatch(m)
		if !tokenLike(sub[2]) {
			return m // "the bearer of bad news"
		}
		return sub[1] + Redacted
	})
	return providerAK.ReplaceAllString(s, Redacted)
}

// tokenLike tells a credential after "Bearer" from an English word: long,
// or with a digit or a symbol in it.
func tokenLike(s string) bool {
	if len(s) >= 24 {
		return true
	}
	return len(s) >= 8 && strings.ContainsAny(s, "0123456789._~+/=-")
}

// Redact masks secrets in every string of the session row and of every
// message (content, tool calls, reasoning, metadata: every text column).
// BLOBs are left alone.
func (x *Export) Redact() {
	if x.Session != nil {
		redactRow(x.Session)
	}
	for i := range x.Messages {
		redactRow(&x.Messages[i])
	}
	x.Redacted = true
}

func redactRow(r *Row) {
	for i, v := range r.Vals {
		if s, ok := v.(string); ok {
			r.Vals[i] = RedactString(s)
		}
	}
}
