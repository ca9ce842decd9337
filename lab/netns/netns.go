// Package netns holds the lab's Linux network primitives: the layout (the
// lab namespace without uplink, its bridge, the pod and Service ranges),
// iproute2 wrappers, pod namespaces wired to the bridge, and dialing from
// outside into a namespace. Node code needs only these, not the lab's
// control-plane supervisor. Root is needed for all of it.
package netns

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Network layout. Everything lives in the lab namespace, which has no uplink
// (no default route): only the bridge subnet and the Service CIDR routed onto
// the bridge are reachable, so lab traffic cannot leave the machine.
const (
	LabNetNS     = "rollprobe-lab"
	PodNetNSPref = "rollprobe-pod-"
	Bridge       = "rpbr0"
	NodeIP       = "10.244.0.1"
	PodCIDR      = "10.244.0.0/24"
	ServiceCIDR  = "10.96.0.0/16"
	// APIServerIP is the first address of the Service CIDR: the kubernetes
	// Service's ClusterIP.
	APIServerIP = "10.96.0.1"
)

// IP runs iproute2 with args and returns its combined output.
func IP(args ...string) (string, error) {
	cmd := exec.Command("ip", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// InNS runs ip inside namespace ns.
func InNS(ns string, args ...string) (string, error) {
	return IP(append([]string{"netns", "exec", ns, "ip"}, args...)...)
}

// List returns the names of the network namespaces ip knows.
func List() ([]string, error) {
	out, err := IP("netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// Exists reports whether a network namespace of that name exists.
func Exists(name string) bool {
	names, _ := List()
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// PIDs lists the processes living in namespace ns.
func PIDs(ns string) []int {
	out, err := IP("netns", "pids", ns)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		var pid int
		if _, err := fmt.Sscanf(f, "%d", &pid); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// SetupLab creates the lab namespace: loopback, the bridge with the
// node address, and the Service CIDR routed onto the bridge so kube-proxy's
// rules see ClusterIP traffic. It is idempotent.
func SetupLab() error {
	if !Exists(LabNetNS) {
		if _, err := IP("netns", "add", LabNetNS); err != nil {
			return err
		}
	}
	steps := [][]string{
		{"link", "set", "lo", "up"},
	}
	if _, err := InNS(LabNetNS, "link", "show", Bridge); err != nil {
		steps = append(steps, []string{"link", "add", Bridge, "type", "bridge"})
	}
	steps = append(steps,
		[]string{"addr", "replace", NodeIP + "/24", "dev", Bridge},
		[]string{"link", "set", Bridge, "up"},
		[]string{"route", "replace", ServiceCIDR, "dev", Bridge, "src", NodeIP},
	)
	for _, s := range steps {
		if _, err := InNS(LabNetNS, s...); err != nil {
			return err
		}
	}
	// Forwarding lets pods reach ClusterIPs through the node (hairpin).
	_, err := IP("netns", "exec", LabNetNS, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	return err
}

// PodNetwork is one pod's namespace and its link to the bridge.
type PodNetwork struct {
	NS   string
	IP   string
	Veth string // the bridge side, in the lab namespace
}

// SetupPod creates namespace ns with eth0 at addr, wired to the
// bridge through a veth pair whose bridge side is named veth.
func SetupPod(pn PodNetwork) error {
	if _, err := IP("netns", "add", pn.NS); err != nil && !Exists(pn.NS) {
		return err
	}
	tmp := pn.Veth + "p"
	steps := [][]string{
		{"link", "add", pn.Veth, "type", "veth", "peer", "name", tmp},
		{"link", "set", tmp, "netns", pn.NS},
		{"link", "set", pn.Veth, "master", Bridge},
		{"link", "set", pn.Veth, "up"},
	}
	for _, s := range steps {
		if _, err := InNS(LabNetNS, s...); err != nil {
			return err
		}
	}
	podSteps := [][]string{
		{"link", "set", "lo", "up"},
		{"link", "set", tmp, "name", "eth0"},
		{"addr", "add", pn.IP + "/24", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "default", "via", NodeIP},
	}
	for _, s := range podSteps {
		if _, err := InNS(pn.NS, s...); err != nil {
			return err
		}
	}
	// Forget any neighbour entry left by an earlier pod with this address,
	// so the node resolves the new MAC instead of sending to a dead one.
	_, _ = InNS(LabNetNS, "neigh", "flush", "to", pn.IP, "dev", Bridge)
	return nil
}

// TeardownPod removes a pod's namespace; deleting it destroys the
// veth pair with it.
func TeardownPod(pn PodNetwork) error {
	if pn.IP != "" {
		defer func() {
			_, _ = InNS(LabNetNS, "neigh", "flush", "to", pn.IP, "dev", Bridge)
			FlushConntrack(pn.IP)
			// kube-proxy keeps routing new connections to the address until
			// it catches up (later still with --proxy-lag); each attempt
			// makes a new entry, so flush again once it must have.
			for _, after := range []time.Duration{2 * time.Second, 5 * time.Second, 15 * time.Second, 40 * time.Second} {
				time.AfterFunc(after, func() { FlushConntrack(pn.IP) })
			}
		}()
	}
	if !Exists(pn.NS) {
		return nil
	}
	_, err := IP("netns", "delete", pn.NS)
	return err
}

// FlushConntrack deletes the lab's connection-tracking entries that were
// NATed to a vanished pod IP, as CNI plugins do on pod deletion. Without it,
// a new connection that reuses a source port of a recent attempt to that pod
// (SYN_SENT entries live 120 s) follows the stale entry to the dead address
// instead of being load-balanced afresh. Best effort: the conntrack tool may
// be missing, and "no entry" is an error to it.
func FlushConntrack(podIP string) {
	if _, err := exec.LookPath("conntrack"); err != nil {
		return
	}
	_ = exec.Command("ip", "netns", "exec", LabNetNS, "conntrack", "-D", "--reply-src", podIP).Run()
}
