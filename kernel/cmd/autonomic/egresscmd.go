package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/config"
)

// egressCmd: `autonomic egress nets [--config F]` resolves the hosts of
// the egress ceiling (the configuration's egress.allow, or the default
// registries) here and prints, one CIDR a line, each address the proxy's
// pinning would refuse (broker.PinAddress with the default networks:
// public unicast only). An empty output means the default works on this
// host. Where a site resolves the registries into a reserved range (a
// gateway or mirror), these are the exact /32 (/128) an operator may list
// in egress.allowed_nets, knowingly: each on stderr with a warning.
func egressCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "nets" {
		fmt.Fprint(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("egress nets", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "kernel configuration (default: the default registries)")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 0 {
		return 2
	}
	hosts := config.DefaultEgressAllow
	if *cfgPath != "" {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			fmt.Fprintln(stderr, "autonomic egress nets:", err)
			return 1
		}
		hosts = cfg.Egress.AllowValue()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var nets []string
	for _, h := range hosts {
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", h)
		if err != nil {
			continue // a name that does not resolve is refused at fetch time anyway
		}
		for _, a := range addrs {
			if _, err := broker.PinAddress(ctx, nil, a.String(), nil); err == nil {
				continue
			}
			n := netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()).String()
			fmt.Fprintf(stderr, "warning: %s resolves to %s, a reserved address the egress proxy refuses by default\n", h, a.Unmap())
			if !slices.Contains(nets, n) {
				nets = append(nets, n)
			}
		}
	}
	for _, n := range nets {
		fmt.Fprintln(stdout, n)
	}
	return 0
}
