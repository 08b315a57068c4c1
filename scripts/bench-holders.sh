#!/usr/bin/env bash
# Holder scan benchmarks (issue 2, "Measure"): the full-host scan against
# `lsof +L1` with ~500 extra processes holding ~20 fds each, and the
# targeted scan of one store with a warm cache. Prints every run, then the
# medians and the ratio to lsof. Run as root (as the agent runs) on an
# otherwise idle machine: wall times swing with load, cpu-ns/op much less.
#
#   scripts/bench-holders.sh            # 5 runs each
#   COUNT=9 scripts/bench-holders.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v lsof >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lsof >/dev/null
	else
		echo "lsof is missing and cannot be installed here: the baseline will be skipped" >&2
	fi
fi

count=${COUNT:-5}
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
# lsof takes about half a second per run: fewer iterations per count.
go test -run '^$' -bench 'FullScan|TargetedScanWarm' -count "$count" ./holders | tee -a "$raw"
go test -run '^$' -bench 'Lsof' -benchtime 5x -count "$count" ./holders | tee -a "$raw"

awk '
function median(name, field,   n, i, j, t, a) {
	n = cnt[name]
	for (i = 1; i <= n; i++) a[i] = val[name, field, i]
	for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j+1] = a[j]; a[j+1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
function ms(ns) { return ns >= 1e6 ? sprintf("%.1f ms", ns/1e6) : sprintf("%.0f µs", ns/1e3) }
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name); sub(/^Benchmark/, "", name)
	c = ++cnt[name]
	for (i = 3; i < NF; i++) {
		if ($(i+1) == "ns/op") val[name, "wall", c] = $i
		if ($(i+1) == "cpu-ns/op") val[name, "cpu", c] = $i
	}
	if (!(name in seen)) { seen[name] = 1; order[++k] = name }
}
END {
	if ("Lsof" in cnt) { lw = median("Lsof", "wall"); lc = median("Lsof", "cpu") }
	printf "\n| benchmark (median of %d) | wall | cpu | wall vs lsof +L1 | cpu vs lsof +L1 |\n|---|---|---|---|---|\n", cnt[order[1]]
	for (i = 1; i <= k; i++) {
		n = order[i]; w = median(n, "wall"); c = median(n, "cpu")
		rw = lw ? sprintf("%.1f×", lw / w) : "n/a"; rc = lc ? sprintf("%.1f×", lc / c) : "n/a"
		if (n == "Lsof") { rw = "1×"; rc = "1×" }
		printf "| %s | %s | %s | %s | %s |\n", n, ms(w), ms(c), rw, rc
	}
}' "$raw"
