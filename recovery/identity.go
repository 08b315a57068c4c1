package recovery

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"path/filepath"

	"github.com/stateguard/stateguard/internal/pyjson"
)

// RecoveryIDKey is the display_metadata key that carries a replayed row's
// recovery id.
const RecoveryIDKey = "diverted_recovery_id"

// IdentityJSON is the bytes a record feeds into the hash chain: the record
// without its durable fields, as json.dumps(identity, sort_keys=True,
// ensure_ascii=False) writes it. Keeping durable fields out of the hash
// keeps the ids of lines written before those fields existed.
func IdentityJSON(fields pyjson.Value) []byte {
	id := pyjson.Value{Kind: pyjson.KindDict}
	for _, m := range fields.Dict {
		if !isDurableField(m.Key) {
			id.Dict = append(id.Dict, m)
		}
	}
	return id.AppendJSON(nil, pyjson.DumpOptions{SortKeys: true})
}

// Chain is the recovery-id hash chain of one JSONL file: SHA-256 seeded
// with the file's resolved path, then for each record a 0x00 byte and the
// record's identity JSON; a record's id is the digest of everything so far.
// So equal lines at different positions get different ids, and a file that
// grows keeps the ids of its earlier lines.
type Chain struct {
	h hash.Hash
}

// NewChain starts the chain of the file whose absolute, symlink-resolved
// path is resolvedPath (see ResolveJSONLPath).
func NewChain(resolvedPath string) *Chain {
	h := sha256.New()
	h.Write([]byte(resolvedPath))
	return &Chain{h: h}
}

// Next feeds one record's identity JSON and returns its recovery id. Sum
// appends the digest of the running state without resetting it.
func (c *Chain) Next(identity []byte) string {
	c.h.Write([]byte{0})
	c.h.Write(identity)
	return hex.EncodeToString(c.h.Sum(nil))
}

// AssignRecoveryIDs computes every record's recovery id, in order, and
// merges it into the record's display_metadata as Hermes does: a JSON
// string is decoded, anything that is not then an object is replaced by
// an empty object, and diverted_recovery_id is set (an existing key keeps
// its position).
func AssignRecoveryIDs(resolvedPath string, recs []Record) {
	c := NewChain(resolvedPath)
	for i := range recs {
		ident := recs[i].identity
		if ident == nil {
			ident = IdentityJSON(recs[i].Fields)
		}
		recs[i].RecoveryID = c.Next(ident)
		recs[i].Fields.Set("display_metadata", mergeRecoveryID(recs[i].Fields, recs[i].RecoveryID))
	}
}

func mergeRecoveryID(fields pyjson.Value, id string) pyjson.Value {
	meta, _ := fields.Get("display_metadata")
	if meta.Kind == pyjson.KindStr {
		v, err := pyjson.Parse(meta.Str)
		if err != nil {
			v = pyjson.Value{}
		}
		meta = v
	}
	merged := pyjson.Value{Kind: pyjson.KindDict}
	if meta.Kind == pyjson.KindDict {
		merged.Dict = append([]pyjson.Member(nil), meta.Dict...)
	}
	merged.Set(RecoveryIDKey, pyjson.String(id))
	return merged
}

// ResolveJSONLPath is Python's Path(path).resolve() for an existing file:
// absolute, with every symlink resolved component by component (so
// "link/.." means the link target's parent, as realpath has it). The
// result seeds the hash chain, so it must equal the string Hermes uses.
func ResolveJSONLPath(path string) (string, error) {
	p := path
	if !filepath.IsAbs(p) {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("resolve %s: %w", path, err)
		}
		// Not filepath.Join: it would clean "link/.." lexically before
		// the link is resolved.
		p = wd + string(filepath.Separator) + p
	}
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", path, err)
	}
	return r, nil
}
