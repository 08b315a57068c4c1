// Package journal is agentd's durable record: incidents and every step of
// their protocol, replay jobs, and guard pauses, in a SQLite database of
// its own (journal.db in the state directory) with embedded, versioned
// migrations. Every change commits before the method returns
// (synchronous=FULL), so what the journal says happened survives a crash
// or a power loss, and a restarted agent resumes from it.
//
// The vocabulary of the record lives here too (Kind, State and its
// forward-only main line, Step, Job), because it is what is stored: the
// incident engine decides the transitions, the journal refuses any that
// would run its states backwards.
//
// OpenReadOnly is for agentctl: it reads a journal while no agent runs,
// never creates, migrates or writes it, and imports nothing of the daemon.
package journal
