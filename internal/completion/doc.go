// Package completion writes shell completion scripts for bash, zsh and
// fish from a description of a program's verbs and flags. Values that
// only the running program knows (profile names, incident ids) are
// completed by calling the program itself: `<prog> <Dynamic> <source>`
// prints one value per line.
//
// It knows nothing of agentctl: cmd/agentctl builds the description from
// its verb table.
package completion
