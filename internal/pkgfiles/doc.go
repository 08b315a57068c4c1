// Command pkgfiles writes the generated files the .deb and .rpm carry, so
// scripts/package builds them from the binaries and templates of the very
// commit it packages:
//
//   - stateguard-agentd.service: the system unit, from the template
//     `agentd install` uses (service.PackageSpec);
//   - agent.toml: the commented default config (service.DefaultConfigFile);
//   - agentd.1.gz, agentctl.1.gz: man pages made from the help text the
//     built binaries print (internal/manpage), so they cannot drift.
//
// Every output depends only on its inputs and the date, which comes from
// SOURCE_DATE_EPOCH: two runs on the same commit write identical bytes.
//
//	go run ./internal/pkgfiles -agentd BIN -agentctl BIN -version V -out DIR
package main
