package recovery

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/store"
)

// The capture layout Hermes writes in capture_retired_wal_generation
// (docs/hermes.md, "Captures"). stateguard
// writes the same layout so either tool reads the other's captures.
const (
	ManifestName    = "manifest.json"
	ManifestVersion = 1
	// MainImageMaxBytes is Hermes' RETIRED_GENERATION_MAIN_IMAGE_MAX_BYTES:
	// a main file up to this size is copied whole, a larger one is kept as
	// its 100-byte header only (<db>.header).
	MainImageMaxBytes = 512 << 20

	// Main image modes, the manifest's main.mode.
	MainModeCopied     = "copied"
	MainModeHeaderOnly = "header_only"

	// CapturedAtLayout is Hermes' time.strftime("%Y-%m-%dT%H:%M:%SZ") in UTC.
	CapturedAtLayout = "2006-01-02T15:04:05Z"

	sqliteHeaderBytes = 100
	walHeaderBytes    = 32
)

// Manifest is manifest.json of a capture directory. Fields are declared in
// key order because Hermes writes the manifest with sort_keys=True; keys
// only Hermes writes (python, note) are kept when read. stateguard's own
// extras live under "stateguard", which Hermes' readers ignore.
type Manifest struct {
	CapturedAt string        `json:"captured_at"`
	Database   string        `json:"database"`
	Main       *ManifestMain `json:"main"`
	Note       string        `json:"note,omitempty"`
	// PathGeneration is the identity of each sidecar found at the path at
	// capture time ("-wal", "-shm"): a newer writer's, if one was minted.
	PathGeneration map[string]fileid.Pair `json:"path_generation_at_capture"`
	PID            int                    `json:"pid"`
	Python         string                 `json:"python,omitempty"`
	SHM            *ManifestFile          `json:"shm"`
	SQLite         string                 `json:"sqlite,omitempty"`
	Stateguard     *StateguardInfo        `json:"stateguard,omitempty"`
	Trigger        string                 `json:"trigger"`
	Version        int                    `json:"version"`
	WAL            *ManifestFile          `json:"wal"`
}

// ManifestFile describes one copied file (wal, shm).
type ManifestFile struct {
	Bytes    int64        `json:"bytes"`
	File     string       `json:"file"`
	Identity *fileid.Pair `json:"identity"`
	SHA256   string       `json:"sha256,omitempty"`
}

// ManifestMain describes the main image: the whole file (mode copied) or,
// past MainImageMaxBytes, its 100-byte header (mode header_only, file
// "<db>.header"). Size is the main file's size, Bytes what was kept.
type ManifestMain struct {
	Bytes    int64        `json:"bytes"`
	File     string       `json:"file"`
	Header   *MainHeader  `json:"header,omitempty"`
	Identity *fileid.Pair `json:"identity"`
	Mode     string       `json:"mode,omitempty"`
	SHA256   string       `json:"sha256,omitempty"`
	Size     int64        `json:"size"`
}

// HeaderOnly reports whether the capture kept only the main's header. Older
// Hermes manifests without a mode are recognised by the ".header" file.
func (m *ManifestMain) HeaderOnly() bool {
	if m == nil {
		return false
	}
	if m.Mode != "" {
		return m.Mode == MainModeHeaderOnly
	}
	return strings.HasSuffix(m.File, ".header")
}

// MainHeader is the parsed SQLite header Hermes records as main.header;
// an unparseable header is written as {"valid": false}.
type MainHeader struct {
	ApplicationID   uint32 `json:"application_id"`
	ChangeCounter   uint32 `json:"change_counter"`
	PageCount       uint32 `json:"page_count"`
	PageSize        uint32 `json:"page_size"`
	UserVersion     uint32 `json:"user_version"`
	Valid           bool   `json:"valid"`
	VersionValidFor uint32 `json:"version_valid_for"`
}

// MarshalJSON writes {"valid": false} for an invalid header, as Hermes does.
func (h MainHeader) MarshalJSON() ([]byte, error) {
	if !h.Valid {
		return []byte(`{"valid": false}`), nil
	}
	type plain MainHeader
	return json.Marshal(plain(h))
}

// ParseMainHeader reads the fields Hermes records from a SQLite header.
func ParseMainHeader(b []byte) MainHeader {
	if len(b) < sqliteHeaderBytes || string(b[:16]) != "SQLite format 3\x00" {
		return MainHeader{}
	}
	be := binary.BigEndian
	ps := uint32(be.Uint16(b[16:18]))
	if ps == 1 {
		ps = 65536
	}
	return MainHeader{
		Valid:           true,
		PageSize:        ps,
		ChangeCounter:   be.Uint32(b[24:28]),
		PageCount:       be.Uint32(b[28:32]),
		UserVersion:     be.Uint32(b[60:64]),
		ApplicationID:   be.Uint32(b[68:72]),
		VersionValidFor: be.Uint32(b[92:96]),
	}
}

// StateguardInfo holds what only stateguard records. Hermes ignores it.
type StateguardInfo struct {
	IncidentID string `json:"incident_id,omitempty"`
	Kind       string `json:"kind,omitempty"`
	// MainHeaderOnly repeats main.mode == header_only so an operator
	// reading only this object sees that the main image is missing.
	MainHeaderOnly bool `json:"main_header_only"`
	// MainSource is "pinned" (read from the orphan's pinned fd) or
	// "snapshot" (a sidecar_lost snapshot of the shared main).
	MainSource string `json:"main_source,omitempty"`
	// Origins says how each file got here: "reflink", "copy", "link"
	// (a hard link of our own snapshot), "header" (the main's header
	// written alone) or "quarantined" (renamed from the store's path by
	// QuarantineSidecars: the original inode).
	Origins map[string]string `json:"origins,omitempty"`
	// Reflinked is true when every file written as a copy was a reflink clone.
	Reflinked bool               `json:"reflinked"`
	Version   int                `json:"version"`
	WALHeader *ManifestWALHeader `json:"wal_header,omitempty"`
}

// ManifestWALHeader is the captured WAL's header: the salts name the WAL
// generation the frames belong to.
type ManifestWALHeader struct {
	CheckpointSeq uint32 `json:"checkpoint_seq"`
	Magic         uint32 `json:"magic"`
	PageSize      uint32 `json:"page_size"`
	Salt1         uint32 `json:"salt1"`
	Salt2         uint32 `json:"salt2"`
}

// parseCaptureWALHeader returns nil when b is not a WAL header (an empty
// WAL, or one whose header was never written).
func parseCaptureWALHeader(b []byte) *ManifestWALHeader {
	if len(b) < walHeaderBytes {
		return nil
	}
	be := binary.BigEndian
	magic := be.Uint32(b[0:4])
	if magic != 0x377f0682 && magic != 0x377f0683 {
		return nil
	}
	return &ManifestWALHeader{
		Magic:         magic,
		PageSize:      be.Uint32(b[8:12]),
		CheckpointSeq: be.Uint32(b[12:16]),
		Salt1:         be.Uint32(b[16:20]),
		Salt2:         be.Uint32(b[20:24]),
	}
}

// CapturedTime parses captured_at; it accepts RFC 3339 with fractions too.
func (m *Manifest) CapturedTime() (time.Time, error) {
	if t, err := time.Parse(CapturedAtLayout, m.CapturedAt); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339Nano, m.CapturedAt)
}

// ErrManifest marks a manifest that is missing or cannot be understood.
var ErrManifest = errors.New("capture manifest unusable")

// readManifestIn reads and checks dir/manifest.json through a handle on
// dir, which must be the directory want records. It is lenient where
// Hermes versions differ (missing shm, note, path generation, main mode or
// sha256; a header-only main) and strict where a reader would be misled:
// an unknown version or a file name that is not a plain name in dir.
func readManifestIn(dir string, want store.DirID) (*Manifest, error) {
	path := filepath.Join(dir, ManifestName)
	b, err := readFileIn(path, want, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w (a capture without its manifest cannot be verified; do not delete the orphan it came from)", ErrManifest, path, err)
	}
	return parseManifest(path, b)
}

func parseManifest(path string, b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: parse %s: %w", ErrManifest, path, err)
	}
	if m.Version == 0 {
		// The earliest Hermes captures predate the version key.
		m.Version = ManifestVersion
	}
	if m.Version != ManifestVersion {
		return nil, fmt.Errorf("%w: %s has version %d, this stateguard reads version %d: upgrade stateguard to read it", ErrManifest, path, m.Version, ManifestVersion)
	}
	for _, f := range m.files() {
		if f.name == "" || f.name != filepath.Base(f.name) || f.name == "." || f.name == ".." || f.name == ManifestName {
			return nil, fmt.Errorf("%w: %s: %s.file %q is not a file name inside the capture", ErrManifest, path, f.role, f.name)
		}
		if f.bytes < 0 {
			return nil, fmt.Errorf("%w: %s: %s.bytes is negative", ErrManifest, path, f.role)
		}
	}
	return &m, nil
}

type manifestEntry struct {
	role   string // "wal", "shm", "main"
	name   string
	bytes  int64
	sha256 string
}

// files lists the files the manifest names, WAL first.
func (m *Manifest) files() []manifestEntry {
	var out []manifestEntry
	if m.WAL != nil {
		out = append(out, manifestEntry{"wal", m.WAL.File, m.WAL.Bytes, m.WAL.SHA256})
	}
	if m.SHM != nil {
		out = append(out, manifestEntry{"shm", m.SHM.File, m.SHM.Bytes, m.SHM.SHA256})
	}
	if m.Main != nil && m.Main.File != "" {
		out = append(out, manifestEntry{"main", m.Main.File, m.Main.Bytes, m.Main.SHA256})
	}
	return out
}

// encodeManifest renders a manifest (capture.json, divert.json) the way
// Hermes' json.dump(sort_keys=True) does closely enough for byte-level
// diffing: sorted keys, two-space indent, no HTML escaping, trailing
// newline.
func encodeManifest(m any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// readFileIn reads a regular file of at most limit bytes through a
// handle on path's directory (openInDir), following no symlink.
func readFileIn(path string, want store.DirID, limit int64) ([]byte, error) {
	f, err := openInDir(path, want)
	if err != nil {
		return nil, err
	}
	return readLimited(f, path, limit)
}

func readLimited(f *os.File, path string, limit int64) ([]byte, error) {
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than %d", path, st.Size(), limit)
	}
	return io.ReadAll(io.LimitReader(f, limit))
}
