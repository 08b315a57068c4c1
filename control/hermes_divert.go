package control

// HermesDivert is a JSONL file Hermes diverted rows to itself
// (<profile>/sessions/<session>.jsonl) that holds records the store
// lacks: agentd replays the lines Hermes appends during an incident;
// others wait for `agentctl replay PATH`. agentctl computes it (read-only)
// for status and doctor; agentd leaves it empty.
type HermesDivert struct {
	Path    string `json:"path"`
	Records int    `json:"records"`
	// Waiting is how many of its records a replay would append now.
	Waiting int `json:"waiting"`
}
