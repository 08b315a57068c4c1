// Package journal is agentd's durable record: incidents and every step of
// their protocol, replay jobs, and guard pauses, in a SQLite database of
// its own (journal.db in the state directory) with embedded, versioned
// migrations. Every change commits before the method returns
// (synchronous=FULL), so what the journal says happened survives a crash
// or a power loss, and a restarted agent resumes from it.
//
// The vocabulary of the record lives here too (Kind, State, Step, Job),
// because it is what is stored. Which state may follow which, and which
// states hold back a store's replay jobs, is the incident engine's state
// table and nothing else: the journal stores what the engine decided
// (Incident.State, Incident.LetsReplay) and refuses only what no engine
// may write, an unknown state or a change to a finished incident.
//
// OpenReadOnly is for agentctl: it reads a journal while no agent runs,
// never creates, migrates or writes it, and imports nothing of the daemon.
package journal
