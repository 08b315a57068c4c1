package main

import "github.com/stateguard/stateguard/internal/manpage"

// The prose around the help text: what the binaries' help does not say.

var agentdPage = manpage.Page{
	Name:    "agentd",
	Summary: "the stateguard agent: keeps Hermes SQLite session stores from losing data",
	Description: `agentd watches every Hermes agent session store on the host (state.db in WAL mode, one per profile).
When a store's file generation is unlinked or replaced while a live process still writes into it,
agentd freezes that writer, pins the orphaned files, captures them, diverts the rows that exist only there,
and replays them exactly once into the healthy store.
It also holds read locks (the guard) that keep a wrongly "last" SQLite connection from deleting a live writer's WAL.

agentd run is the service itself; the other verbs install and control it under systemd or launchd.
The packaged systemd unit is stateguard-agentd.service; the package neither enables nor starts it:
systemctl enable --now stateguard-agentd.

On SIGHUP agentd reloads its configuration (an invalid file is refused and the running one kept);
SIGTERM and SIGINT stop it cleanly. Unfinished incidents resume from the journal at the next start.`,
	ExitStatus: `agentd run exits 0 after a clean stop and 1 when it cannot start or stops with errors.
agentd status exits 0 when the service runs and 3 when it does not.
Every verb exits 2 on a usage error.`,
	Files: [][2]string{
		{"/etc/stateguard/agent.toml", "configuration (as root; otherwise $XDG_CONFIG_HOME/stateguard/agent.toml). Every key is optional."},
		{"/var/lib/stateguard", "state directory: the incident journal and the lock that keeps a second agentd out."},
		{"/run/stateguard/agent.sock", "control socket agentctl talks to."},
		{"/usr/lib/systemd/system/stateguard-agentd.service", "the packaged systemd unit; one written by agentd install into /etc/systemd/system overrides it."},
	},
	SeeAlso: []string{"agentctl(1)", "systemctl(1)", "journalctl(1)"},
}

var agentctlPage = manpage.Page{
	Name:    "agentctl",
	Summary: "the stateguard operator's CLI",
	Description: `agentctl shows what agentd sees (stores, generations, the processes holding them, incidents and replay jobs)
and acts on it: releases held writers, pauses the guard for maintenance, replays diverted rows,
restores a store from a backup without orphaning anyone, adopts a session into another profile, exports sessions.
Verbs that only read work without agentd (they scan by themselves or read its journal read-only);
verbs that change a store or an incident talk to agentd over its control socket when it runs.`,
	ExitStatus: `0 ok; 1 error; 2 usage; 3 refused because it was unsafe (a process holds the store,
or the holder scan could not see every process that could); 4 partial (something was skipped; the output lists it).`,
	Files: [][2]string{
		{"/run/stateguard/agent.sock", "agentd's control socket (as root; otherwise $XDG_RUNTIME_DIR/stateguard/agent.sock)."},
		{"/var/lib/stateguard/journal.db", "agentd's journal, read read-only when agentd does not run."},
	},
	SeeAlso: []string{"agentd(1)"},
}
