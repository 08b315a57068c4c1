// Command benchscale measures one agentd on one home of N Hermes stores
// (issue 16): start time, idle CPU, memory, inotify watches, reconcile
// duration and freeze latency, as one table per agentd build.
//
//	go run ./internal/benchscale -n 100,1000,10000          # the README's table
//	go run ./internal/benchscale -n 100 -idle 5s -trials 5  # a quick check
//	go run ./internal/benchscale -n100k                     # also 100,000 stores
//	go run ./internal/benchscale -base c924f97 -n 100,1000  # and the same for an earlier commit
//	go run ./internal/benchscale -base A -head B -n 1000    # commit A, then commit B (not the working tree)
//
// Each store is a copy of one empty Hermes store in WAL mode (main file
// only: no connection is open, so no -wal/-shm), in <home>/state.db and
// <home>/profiles/pNNNNNN/state.db. agentd runs as a child process with
// the default config but for the paths, guard on, the replaced policy
// "kill" (so a trial ends quickly) and debug logging, which the bench
// reads. Columns:
//
//   - start: from exec to the agent.started log line;
//   - idle CPU: user+system time of agentd over -idle (default 60 s),
//     after one reconcile has passed, as % of one core;
//   - RSS: resident set after the idle window, and its peak (VmHWM);
//   - watches: inotify watches agentd holds (its fdinfo);
//   - reconcile p50/p99: wall time of the reconciles in the idle window
//     ("reconcile done" lines; "-" for a build that does not log them);
//   - freeze p50/p99: over -trials trials, a live writer on a random
//     store, then a fresh copy renamed over its state.db; the time from
//     rename(2) until the writer is seen stopped (polling its
//     /proc/<pid>/stat), and the agent's own holder.frozen latency.
//
// Run it as root on an otherwise idle machine: every figure but the
// watch count moves with load.
package main
