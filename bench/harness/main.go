// Command harness is the Go half of bench/run.sh: the script starts,
// pins, loads and stops the processes; harness writes their
// configurations, turns each load generator's output into a line of
// figures, and renders the report from what the run left in its work
// directory.
//
//	harness configs                      write every configuration of the run
//	harness measure -variant V -round R -proxy P -kind K -out FILE -ticks T -cpu0-ticks C
//	                                     parse one run's output, append its figures to runs.tsv
//	harness attack -round R -proxy P -out FILE
//	                                     parse one slowloris attack, append it to slowloris.tsv
//	harness openloop -proto P -neighbour N -rate R -round R -proxy P -out FILE -perf FILE -ticks T -cpu0-ticks C
//	                                     parse one open-loop run and its perf counts, append them to openloop.tsv
//	harness report                       render the report
//
// The knobs come from the environment, as run.sh resolved and exported
// them (the same names: DURATION, ROUNDS, the ports...): run.sh holds
// their defaults, harness none. The work directory's files are described
// in bench/README.md (KEEP_WORK=1 keeps them).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: harness configs|measure|attack|openloop|report [flags]"))
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "configs":
		err = writeConfigs()
	case "measure":
		err = measure(args)
	case "attack":
		err = attack(args)
	case "openloop":
		err = openLoopRun(args)
	case "report":
		err = report(os.Stdout)
	default:
		err = fmt.Errorf("unknown command %q (configs, measure, attack, openloop, report)", cmd)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "harness:", err)
	os.Exit(1)
}

// env returns the variable run.sh exported; unset is an error, empty is
// a value (BASE, for one, is empty when no base is measured).
func env(name string) string {
	v, ok := os.LookupEnv(name)
	if !ok {
		fail(fmt.Errorf("%s is not set: harness is run by bench/run.sh, which exports it", name))
	}
	return v
}

// envInt returns the integer variable name.
func envInt(name string) int {
	n, err := strconv.Atoi(env(name))
	if err != nil {
		fail(fmt.Errorf("%s: %w", name, err))
	}
	return n
}

// work returns the path of a file in the run's work directory.
func work(elem ...string) string { return filepath.Join(append([]string{env("WORK")}, elem...)...) }

// parts returns the parts run (PARTS_RUN, "h1, h2c").
func parts() map[string]bool {
	m := map[string]bool{}
	for p := range strings.SplitSeq(env("PARTS_RUN"), ", ") {
		m[p] = true
	}
	return m
}

// proxies returns whether each proxy is measured (PROXIES).
func proxies() map[string]bool {
	m := map[string]bool{}
	for _, p := range strings.Fields(env("PROXIES")) {
		m[p] = true
	}
	return m
}

// loopback returns 127.0.0.1:port, port being the variable name.
func loopback(name string) string { return "127.0.0.1:" + strconv.Itoa(envInt(name)) }
