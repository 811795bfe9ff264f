package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DNS resolves a name to endpoints and re-resolves it every refresh
// interval. With a port, the name's A and AAAA records give the hosts;
// without one, its SRV records give hosts and ports. A failed lookup keeps
// the last good set and logs why.
type DNS struct {
	name     string
	port     int
	refresh  time.Duration
	resolver *net.Resolver
	log      *slog.Logger
}

// dnsTimeout bounds one lookup.
const dnsTimeout = 5 * time.Second

// NewDNS returns a DNS source. server, if not empty, is the host:port of
// the DNS server to ask instead of the system's.
func NewDNS(name string, port int, refresh time.Duration, server string, log *slog.Logger) *DNS {
	r := net.DefaultResolver
	if server != "" {
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}}
	}
	return &DNS{name: name, port: port, refresh: refresh, resolver: r, log: log}
}

// Load resolves the name once.
func (d *DNS) Load() (Set, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dnsTimeout)
	defer cancel()
	return d.resolve(ctx)
}

func (d *DNS) resolve(ctx context.Context) (Set, error) {
	var eps []Endpoint
	if d.port > 0 {
		addrs, err := d.resolver.LookupIPAddr(ctx, d.name)
		if err != nil {
			return Set{}, fmt.Errorf("discovery: resolving %s: %w", d.name, err)
		}
		for _, a := range addrs {
			eps = append(eps, Endpoint{Address: net.JoinHostPort(a.IP.String(), strconv.Itoa(d.port))})
		}
	} else {
		_, srvs, err := d.resolver.LookupSRV(ctx, "", "", d.name)
		if err != nil {
			return Set{}, fmt.Errorf("discovery: resolving SRV %s: %w", d.name, err)
		}
		for _, s := range srvs {
			eps = append(eps, Endpoint{Address: net.JoinHostPort(strings.TrimSuffix(s.Target, "."), strconv.Itoa(int(s.Port)))})
		}
	}
	if len(eps) == 0 {
		return Set{}, errors.New("discovery: " + d.name + " has no records")
	}
	// A stable order, so that an unchanged answer in another order is not
	// an update.
	slices.SortFunc(eps, func(a, b Endpoint) int { return strings.Compare(a.Address, b.Address) })
	eps = slices.Compact(eps)
	return Set{Endpoints: eps, Source: "dns " + d.name, Updated: time.Now()}, nil
}

// Run resolves the name now and every refresh interval, delivering each
// answer that differs from the last good one, until ctx ends.
func (d *DNS) Run(ctx context.Context, update func(Set)) error {
	var last []Endpoint
	haveLast := false
	t := time.NewTicker(d.refresh)
	defer t.Stop()
	for {
		lookup, cancel := context.WithTimeout(ctx, dnsTimeout)
		set, err := d.resolve(lookup)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			d.log.Warn("DNS lookup failed; keeping the last good set", "name", d.name, "err", err)
		case !haveLast || !slices.Equal(set.Endpoints, last):
			last, haveLast = set.Endpoints, true
			update(set)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
