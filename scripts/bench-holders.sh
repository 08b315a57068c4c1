#!/usr/bin/env bash
# Holder scan benchmarks: the full-host scan against `lsof +L1` with ~500
# extra processes holding ~20 fds each plus one writer, without and with
# 50 "containers" (processes in mount namespaces of their own holding ~20
# fds on a bind-mounted directory); the same scan as of BASE, an earlier
# commit (default: where this branch left main), on the same host in the
# same run; and the targeted scan of one store with a warm cache. Prints
# every run, then the medians and the ratios. Run as root (as the agent
# runs, and the containers need it) on an otherwise idle machine: wall
# times swing with load, cpu-ns/op much less.
#
#   scripts/bench-holders.sh            # 5 runs each
#   COUNT=9 scripts/bench-holders.sh
#   BASE=551b98f scripts/bench-holders.sh   # the scan before inode matching
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
base=${BASE:-$(git merge-base HEAD main 2>/dev/null || true)}
raw=$(mktemp)
tree=$(mktemp -d)
trap 'rm -rf "$raw" "$tree"' EXIT

# The earlier scan: that commit's package with this benchmark file added
# (they use only what the package has had since the fleet benchmark).
if [ -n "$base" ] && [ "$(git rev-parse "$base")" != "$(git rev-parse HEAD)" ]; then
	git archive "$base" | tar -x -C "$tree"
	# bench_test.go has the loops and the lsof helper the namespace
	# benchmark calls.
	cp holders/bench_ns_linux_test.go holders/bench_test.go "$tree/holders/"
	(cd "$tree" && go test -run '^$' -bench 'HostScan' -count "$count" ./holders) |
		sed 's/^BenchmarkHostScan/BenchmarkBaseHostScan/' | tee -a "$raw"
else
	echo "no earlier commit to compare with (BASE=$base is HEAD): pass BASE=<commit>" >&2
fi
go test -run '^$' -bench 'FullScan|TargetedScanWarm|HostScan' -count "$count" ./holders | tee -a "$raw"
# lsof takes about half a second per run: fewer iterations per count.
go test -run '^$' -bench 'Lsof' -benchtime 5x -count "$count" ./holders | tee -a "$raw"

awk -v base="$base" '
function median(name, field,   n, i, j, t, a) {
	n = cnt[name]
	for (i = 1; i <= n; i++) a[i] = val[name, field, i]
	for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j+1] = a[j]; a[j+1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
function ms(ns) { return ns >= 1e6 ? sprintf("%.1f ms", ns/1e6) : sprintf("%.0f µs", ns/1e3) }
function ratio(a, b) { return (a && b) ? sprintf("%.1f×", a / b) : "n/a" }
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
		rw = ratio(lw, w); rc = ratio(lc, c)
		if (n == "Lsof") { rw = "1×"; rc = "1×" }
		if (n ~ /^(Base)?Host/) continue
		printf "| %s | %s | %s | %s | %s |\n", n, ms(w), ms(c), rw, rc
	}
	printf "\n| host | scan (%s, before) wall / cpu | scan (HEAD) wall / cpu | HEAD cpu ÷ before | lsof +L1 wall | lsof ÷ HEAD (wall) |\n|---|---|---|---|---|---|\n", base
	for (i = 1; i <= k; i++) {
		n = order[i]
		if (n !~ /^HostScan\//) continue
		h = n; sub(/^HostScan\//, "", h)
		b = "BaseHostScan/" h; l = "HostLsof/" h
		bw = (b in cnt) ? median(b, "wall") : 0; bc = (b in cnt) ? median(b, "cpu") : 0
		nw = median(n, "wall"); nc = median(n, "cpu")
		lsw = (l in cnt) ? median(l, "wall") : 0
		printf "| %s | %s / %s | %s / %s | %s | %s | %s |\n", h, bw ? ms(bw) : "n/a", bc ? ms(bc) : "n/a",
			ms(nw), ms(nc), bc ? sprintf("%.2f", nc / bc) : "n/a", lsw ? ms(lsw) : "n/a", ratio(lsw, nw)
	}
}' "$raw"
