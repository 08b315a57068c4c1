// Command benchscale measures one agentd on one home of N Hermes stores
// (issue 16): start time, idle CPU, memory, inotify watches, reconcile
// duration and freeze latency, as one table per agentd build.
//
//	go run ./internal/benchscale -n 100,1000,10000          # docs/benchmarks.md's table
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
//     store that the agent already knows (the check its -shm set off has
//     done its full scan: the writer is in the holder cache, as any
//     writer running for more than a moment is), then a fresh copy
//     renamed over its state.db; the time from rename(2) until the
//     kernel says the writer is stopped (waitid WSTOPPED: every thread
//     of it has stopped, which takes each thread some CPU after the
//     agent's SIGSTOP; a poll loop would take a core from them), and
//     the agent's own holder.frozen latency (from the event to its
//     kill(2)). This is the incident fast path; with 50 trials the
//     p99 is the slowest trial;
//   - cold p50/p99 (with -cold N): the same, renamed as soon as the guard
//     is armed on the writer's -shm, which can be before the agent's scan
//     has seen the writer (what this column measured before: mostly the
//     time of a full scan).
//
// -dirs D makes each home D profile directories in all, the ones past the
// stores empty (-n 1000 -dirs 100000: the 100,000-directory flood case;
// the stores sort first, so they are within max_profiles_per_home).
// -profile DIR has each agentd write its CPU and heap profiles there.
// -phases prints each freeze trial's split on stderr (the rename and the
// unlinks, rename to stopped, the agent's event to kill). -head-env
// NAME=VALUE,... sets environment variables of the measured agentd only,
// not of the -base one: -base X -head X -head-env GOGC=off measures one
// build with and without its garbage collector, side by side.
//
// Run it as root on an otherwise idle machine: every figure but the
// watch count moves with load.
package main
