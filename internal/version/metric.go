package version

// The stateguard_build_info gauge: always 1, its labels say which build
// is running, so a dashboard can show it and a rule can join on it.
const (
	BuildInfoName = "stateguard_build_info"
	BuildInfoHelp = "Always 1; the labels identify the running build (version, VCS revision, Go version, embedded SQLite)."
)

// BuildInfoLabels are the gauge's labels: version, revision, goversion,
// sqlite. A value the build does not know is "unknown" rather than empty,
// since Prometheus treats an empty label as an absent one.
func (i Info) BuildInfoLabels() map[string]string {
	or := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	return map[string]string{
		"version":   or(i.Version),
		"revision":  or(i.Revision),
		"goversion": or(i.GoVersion),
		"sqlite":    or(i.SQLite),
	}
}
