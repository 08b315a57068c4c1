// Package manpage turns the help text agentd and agentctl print into a
// man(7) page, so the packages' man pages say exactly what the binaries
// say and cannot drift from them. The help text is kept verbatim (as
// preformatted blocks); only what roff would misread is escaped.
package manpage
