// Command coredns is the lab's cluster DNS: upstream CoreDNS, run by its own
// coremain as CoreDNS's main package (v1.15.0) runs it, with only the plugins the
// lab's Corefile (lab/edge.go) uses. This is CoreDNS's compile-time plugin
// selection (what its plugin.cfg does), done with imports: the full build
// compiles every plugin's SDK (AWS, Azure, Google Cloud, Datadog's tracer,
// etcd, ...): from empty Go caches on 2 idle cores 235 s, this 143 s
// (2026-11-26). A Corefile naming a plugin left out here fails to load
// ("no action found for directive 'forward' with server type 'dns'
// (missing a plugin?)"): add its import when the lab's Corefile takes it.
package main

import (
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

func main() { coremain.Run() }
