package version

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	_ "modernc.org/sqlite" // the one SQLite in the binary; Read asks it its version
)

// version is set with -ldflags -X by builds that know their release
// (scripts/package); it wins over the module version in the build info.
var version string

// Devel is the version of a build that carries none: `go run`, `go test`,
// or `go build` outside a VCS checkout.
const Devel = "devel"

// Info identifies one build. Its JSON form is the stable `version --json`
// document's build part; fields are only ever added.
type Info struct {
	// Version is the release (ldflags), else the module version the
	// toolchain stamped (a tag like v1.4.0, or a pseudo-version
	// v0.0.0-20261201091700-551b98f0a1b2 with +dirty for a modified
	// checkout), else Devel.
	Version string `json:"version"`
	// Revision is the VCS commit, RevisionTime its commit time (RFC 3339)
	// and Modified whether the working tree had uncommitted changes; ""
	// and false when the build carries no VCS information (go install
	// module@version, a source archive).
	Revision     string `json:"revision"`
	RevisionTime string `json:"revision_time"`
	Modified     bool   `json:"modified"`
	GoVersion    string `json:"go_version"`
	Platform     string `json:"platform"` // GOOS/GOARCH
	// SQLite is the embedded SQLite's sqlite_version(); "" until Read
	// asked it, or when it could not answer.
	SQLite string `json:"sqlite_version"`
}

// Build returns what the build info says, without asking SQLite.
func Build() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return fromBuildInfo(bi, version)
}

// Read is Build plus the embedded SQLite's version. It opens an in-memory
// database only: no file lock is taken, so it may run before
// modernc.org/sqlite's process-wide OFDLocking switch, which must precede
// the first file lock.
func Read(ctx context.Context) (Info, error) {
	i := Build()
	v, err := SQLite(ctx)
	if err != nil {
		return i, err
	}
	i.SQLite = v
	return i, nil
}

// SQLite asks the embedded SQLite its version (`select sqlite_version()`
// on an in-memory database).
func SQLite(ctx context.Context) (string, error) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return "", fmt.Errorf("open in-memory sqlite: %w", err)
	}
	defer db.Close()
	var v string
	if err := db.QueryRowContext(ctx, "select sqlite_version()").Scan(&v); err != nil {
		return "", fmt.Errorf("select sqlite_version(): %w (hint: the binary's embedded SQLite is broken; rebuild or reinstall stateguard)", err)
	}
	return v, nil
}

// fromBuildInfo is Build on an explicit build info (nil: none), so tests
// can feed it what each kind of build stamps.
func fromBuildInfo(bi *debug.BuildInfo, override string) Info {
	i := Info{Version: Devel, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if bi.GoVersion != "" {
			i.GoVersion = bi.GoVersion
		}
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			i.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Revision = s.Value
			case "vcs.time":
				i.RevisionTime = s.Value
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
	}
	if o := strings.TrimSpace(override); o != "" {
		i.Version = o
	}
	return i
}

// ShortRevision is the first 12 hex digits of the revision, as git and Go
// pseudo-versions abbreviate it.
func (i Info) ShortRevision() string {
	if len(i.Revision) > 12 {
		return i.Revision[:12]
	}
	return i.Revision
}
