package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

type options struct {
	sizes     []int
	idle      time.Duration
	trials    int
	cold      int
	dirs      int
	profile   string
	reconcile time.Duration
	base      string
	head      string
	keep      bool
	phases    bool
	headEnv   []string // extra environment of the head build's agentd only
}

func main() {
	var o options
	sizes := flag.String("n", "100,1000,10000", "store counts, comma-separated")
	big := flag.Bool("n100k", false, "also measure 100,000 stores")
	flag.DurationVar(&o.idle, "idle", 60*time.Second, "idle CPU window")
	flag.IntVar(&o.trials, "trials", 50, "freeze trials per store count, each with a writer the agent already knows")
	flag.IntVar(&o.cold, "cold", 0, "also this many freeze trials with a writer that just started (the cold columns)")
	flag.IntVar(&o.dirs, "dirs", 0, "make the home this many profile directories in all, the ones past the stores empty (100000: the flood case)")
	flag.StringVar(&o.profile, "profile", "", "have each agentd write its Go profiles (STATEGUARD_PROFILE_DIR) under this directory, one subdirectory a run")
	flag.DurationVar(&o.reconcile, "reconcile", 10*time.Second, "agentd's reconcile interval (its default is 10s)")
	flag.StringVar(&o.base, "base", "", "also measure agentd as of this commit (a baseline), first")
	flag.StringVar(&o.head, "head", "", "measure agentd as of this commit instead of the working tree")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp directories")
	flag.BoolVar(&o.phases, "phases", false, "print each freeze trial's times on stderr (rename and unlinks, rename to stopped, the agent's event to kill)")
	headEnv := flag.String("head-env", "", "comma-separated NAME=VALUE pairs for the measured (head or working-tree) agentd only, not the -base one (-base X -head X -head-env GOGC=off: the same build without its garbage collector)")
	flag.Parse()
	if *headEnv != "" {
		for _, kv := range strings.Split(*headEnv, ",") {
			if !strings.Contains(kv, "=") {
				fmt.Fprintf(os.Stderr, "benchscale: -head-env: %q is not NAME=VALUE\n", kv)
				os.Exit(2)
			}
			o.headEnv = append(o.headEnv, kv)
		}
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "benchscale: -n: %q is not a store count\n", s)
			os.Exit(2)
		}
		o.sizes = append(o.sizes, n)
		if o.dirs > 0 && o.dirs < n {
			fmt.Fprintf(os.Stderr, "benchscale: -dirs %d is fewer than %d stores\n", o.dirs, n)
			os.Exit(2)
		}
	}
	if *big {
		o.sizes = append(o.sizes, 100_000)
	}
	if err := run(o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchscale:", err)
		os.Exit(1)
	}
}

// build is one agentd binary to measure, and its extra environment.
type build struct {
	name, bin string
	env       []string
}

func run(o options, out io.Writer) error {
	root, err := os.MkdirTemp("", "stateguard-benchscale-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(root)
	}
	bin := filepath.Join(root, "bin")
	writer := filepath.Join(bin, "writer")
	if err := hermestest.BuildWriter(writer); err != nil {
		return err
	}
	var builds []build
	if o.base != "" {
		b, err := buildCommit(o.base, root, "base")
		if err != nil {
			return err
		}
		builds = append(builds, b)
	}
	if o.head != "" {
		b, err := buildCommit(o.head, root, "head")
		if err != nil {
			return err
		}
		b.env = o.headEnv
		builds = append(builds, b)
	} else {
		head := filepath.Join(bin, "agentd")
		if b, err := exec.Command("go", "build", "-o", head, "./cmd/agentd").CombinedOutput(); err != nil {
			return fmt.Errorf("build agentd (run from the repository root): %v\n%s", err, b)
		}
		builds = append(builds, build{name: "this tree", bin: head, env: o.headEnv})
	}
	for _, b := range builds {
		var rows []row
		for _, n := range o.sizes {
			r, err := measure(o, b, n, writer, filepath.Join(root, fmt.Sprintf("%s-%d", filepath.Base(b.bin), n)))
			if err != nil {
				return fmt.Errorf("%s, %d stores: %w", b.name, n, err)
			}
			fmt.Fprintf(os.Stderr, "benchscale: %s, %d stores done\n", b.name, n)
			rows = append(rows, r)
		}
		printTable(out, b.name, o, rows)
	}
	return nil
}

// buildCommit builds agentd from a commit of this repository; role
// (base, head) names the build.
func buildCommit(commit, root, role string) (build, error) {
	tree := filepath.Join(root, role+"-src")
	if err := os.MkdirAll(tree, 0o700); err != nil {
		return build{}, err
	}
	sh := fmt.Sprintf("git archive %q | tar -x -C %q", commit, tree)
	if b, err := exec.Command("sh", "-c", sh).CombinedOutput(); err != nil {
		return build{}, fmt.Errorf("export %s: %v\n%s", commit, err, b)
	}
	bin := filepath.Join(root, "bin", "agentd-"+role)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/agentd")
	cmd.Dir = tree
	if b, err := cmd.CombinedOutput(); err != nil {
		return build{}, fmt.Errorf("build agentd at %s: %v\n%s", commit, err, b)
	}
	return build{name: role + " " + commit, bin: bin}, nil
}

func printTable(out io.Writer, name string, o options, rows []row) {
	if len(rows) > 0 && len(rows[0].env) > 0 {
		name += ", environment " + strings.Join(rows[0].env, " ")
	}
	fmt.Fprintf(out, "\nagentd (%s): idle window %v, reconcile %v, %d freeze trials (%d cold)\n", name, o.idle, o.reconcile, o.trials, o.cold)
	if o.dirs > 0 {
		fmt.Fprintf(out, "each home: %d profile directories, the ones past the stores empty\n", o.dirs)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "stores\tstart\tidle CPU\tRSS\tpeak RSS\twatches\treconcile p50\tp99\tfreeze p50\tp99\tagent p50\tp99\t"
	if o.cold > 0 {
		head += "cold p50\tp99\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%.2f%%\t%d MB\t%d MB\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t", r.stores, dur(r.start), r.idleCPU,
			r.rssKB/1024, r.peakKB/1024, r.watches, ms(r.reconcile, 50), ms(r.reconcile, 99),
			ms(r.freeze, 50), ms(r.freeze, 99), ms(r.agentFreeze, 50), ms(r.agentFreeze, 99))
		if o.cold > 0 {
			fmt.Fprintf(tw, "%s\t%s\t", ms(r.cold, 50), ms(r.cold, 99))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(out, "(freeze: rename(2) until waitid says every thread of the writer stopped, the writer already in the agent's holder cache; agent: its holder.frozen latency_ms, from the event to its kill(2))")
	for _, r := range rows {
		if r.missed > 0 {
			fmt.Fprintf(out, "(%d stores: %d trials measured nothing and were run again: the writer was killed before the bench's waitid ran, a loaded machine)\n", r.stores, r.missed)
		}
	}
	if o.cold > 0 {
		fmt.Fprintln(out, "(cold: the same with the rename as soon as the guard is armed on a writer that just started, before the agent's scan has seen it)")
	}
	if len(rows) > 0 && max(rows[len(rows)-1].stores, o.dirs) > store.DefaultMaxProfiles {
		fmt.Fprintf(out, "(past %d profiles in one home the rest are not watched: max_profiles_per_home)\n", store.DefaultMaxProfiles)
	}
}

func dur(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}
