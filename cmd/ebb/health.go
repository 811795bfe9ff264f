package main

import (
	"bufio"
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// cmdHealth asks a running ebb whether it is ready (GET /ready on its
// probe address, else its admin address), or any URL whether it answers
// 200: a container healthcheck for images without a shell or curl.
func cmdHealth(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ebb health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr, cf := adminFlags(fs, "admin or probe address of the running ebb, host:port", "read the address from this configuration file instead (admin.probe_address, else admin.address)")
	path := fs.String("path", "/ready", "path to ask: /ready (takes traffic) or /live (runs)")
	rawURL := fs.String("url", "", "ask this http:// URL instead (any application's health endpoint)")
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	set, code := checkAdminFlags(fs, "ebb health", *timeout, stderr)
	if code >= 0 {
		return code
	}
	if set["url"] && (set["admin"] || set["config"] || set["path"]) {
		fmt.Fprintln(stderr, "ebb health: -url names what to ask; it goes without -admin, -config and -path")
		return exitUsage
	}
	target := *rawURL
	if target != "" {
		if u, err := url.Parse(target); err != nil || u.Scheme != "http" || u.Host == "" {
			fmt.Fprintf(stderr, "ebb health: -url: expected http://host:port/path, got %q\n", target)
			return exitUsage
		}
	} else {
		if !strings.HasPrefix(*path, "/") {
			fmt.Fprintf(stderr, "ebb health: -path: expected a path starting with /, got %q\n", *path)
			return exitUsage
		}
		if set["config"] {
			cfg, err := loadConfig(*cf)
			if err != nil {
				printConfigError(stderr, err)
				return exitConfig
			}
			*addr = cmp.Or(cfg.Admin.ProbeAddress, cfg.Admin.Address)
		}
		var ok bool
		if target, ok = healthURL(*addr, *path); !ok {
			fmt.Fprintf(stderr, "ebb health: -admin: expected host:port, got %q\n", *addr)
			return exitUsage
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		fmt.Fprintf(stderr, "ebb health: %v\n", err)
		return exitUsage
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "ebb health: %s: %v\n", target, err)
		return exitFailed
	}
	defer resp.Body.Close()
	// The first line of the body says why (/ready: the drain's phase).
	line, _ := bufio.NewReader(io.LimitReader(resp.Body, 512)).ReadString('\n')
	line = strings.TrimSpace(line)
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "ebb health: %s: %s %s\n", target, resp.Status, line)
		return exitFailed
	}
	fmt.Fprintf(stdout, "%s: %s %s\n", target, resp.Status, line)
	return exitOK
}

// healthURL is the URL of path on the server listening on addr; a socket
// bound to every interface is asked on loopback.
func healthURL(addr, path string) (string, bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", false
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port) + path, true
}
