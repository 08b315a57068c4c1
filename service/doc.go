// Package service wires agentd into the host's service manager
// (kardianos/service: systemd, launchd), renders the unit and plist
// templates, and loads and validates the TOML configuration file.
//
// It knows nothing of SQL.
package service
