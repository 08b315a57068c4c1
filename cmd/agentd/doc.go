// Command agentd is the stateguard service: it watches every Hermes session
// store on the host, notices the moment a store's file generation is unlinked
// or replaced under a live writer, and runs the incident protocol (freeze,
// pin, capture, divert, replay) described in docs/design.md.
//
// It knows nothing of SQL itself; it wires the watcher, holders, store,
// recovery and supervisor packages together and talks to the service
// manager through the service package.
package main
