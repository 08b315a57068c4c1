// Command agentctl is the operator's CLI for stateguard. Verbs that only
// read (status, holders) work standalone; verbs that change a store or an
// incident talk to agentd over its control socket when it runs.
//
// Exit codes: 0 ok, 1 error, 2 usage, 3 refused or unsafe (orphan holders,
// an unknown scan), 4 partial (something was skipped).
package main
