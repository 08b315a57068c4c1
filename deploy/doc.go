// Package deploy holds what operators deploy next to agentd: Prometheus
// alerting rules with their promtool unit tests (prometheus/) and a
// Grafana dashboard (grafana/). It has no code; its test checks that the
// rules and the dashboard name only metrics agentd registers.
package deploy
