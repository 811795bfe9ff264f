package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/telemetry"
)

// cmdCheck validates a configuration and prints every problem, one a line.
func cmdCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ebb check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf configFlags
	cf.register(fs)
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ebb check: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	cfg, err := loadConfig(cf)
	if err != nil {
		printConfigError(stderr, err)
		return exitConfig
	}
	printIgnored(stderr, cfg)
	// What ebb run's telemetry.New would refuse beyond the file: the
	// OTLP protocol of the environment, the TLS files' content.
	if err := telemetry.CheckTracing(cfg.Telemetry.Tracing); err != nil {
		fmt.Fprintln(stderr, "ebb:", err)
		return exitConfig
	}
	fmt.Fprintf(stdout, "%s: ok\n", cf.path)
	return exitOK
}

func loadConfig(cf configFlags) (*config.Config, error) {
	return config.Load(cf.path, config.Options{Environ: os.Environ(), Sets: cf.sets})
}

// printIgnored warns of the EBB_ environment variables that are not
// configuration keys (one may be a misspelt key), one a line.
func printIgnored(w io.Writer, cfg *config.Config) {
	for _, p := range cfg.Ignored {
		fmt.Fprintln(w, "ebb: config: warning:", p.String())
	}
}

// printConfigError prints a configuration error, one problem a line.
func printConfigError(w io.Writer, err error) {
	var ce *config.Error
	if errors.As(err, &ce) {
		for _, p := range ce.Problems {
			fmt.Fprintln(w, "ebb: config:", p.String())
		}
		return
	}
	fmt.Fprintln(w, "ebb:", err)
}
