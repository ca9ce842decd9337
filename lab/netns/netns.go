// Package netns holds the lab's Linux network primitives: the layout (a lab
// network without uplink joining a control-plane host and the nodes, each
// node with its own pod subnet), iproute2 wrappers, and dialing from outside
// into a namespace. Node code needs only these, not the lab's control-plane
// supervisor. Root is needed for all of it.
package netns

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// Network layout. The lab network is a bridge in the hub namespace, which is
// both the control-plane host and a client host that is not a node (for
// NodePort or load-balancer style traffic). Each node is a namespace with
// eth0 on the lab network and a pod bridge for its pod subnet, which the CNI
// bridge plugin adopts. No namespace has a route out of the lab, so lab
// traffic cannot leave the machine.
const (
	LabNetNS    = "rollprobe-lab" // the hub: control plane and client host
	LabBridge   = "rpbr0"
	LabCIDR     = "10.100.0.0/24"
	HubIP       = "10.100.0.1" // the apiserver's address
	ClusterCIDR = "10.244.0.0/16"
	ServiceCIDR = "10.96.0.0/16"
	// ClusterDNS is the kube-dns Service's ClusterIP, which every pod's
	// resolv.conf names (the kubelet's clusterDNS). CoreDNS itself runs on
	// the hub, the Service's one endpoint.
	ClusterDNS    = "10.96.0.10"
	ClusterDomain = "cluster.local"
	// EdgeDomain is the lab's public-looking zone: CoreDNS answers every
	// name in it with the hub's address, where the ingress controller
	// (Traefik) listens on :80 and :443, as a DNS name pointing at a load
	// balancer would.
	EdgeDomain = "lab.example"
	// NodeNSPrefix starts every node namespace's name.
	NodeNSPrefix = "rollprobe-lab-node-"
	// PodBridge is each node's bridge for its pods (the CNI bridge
	// plugin's), whose address is the pods' gateway.
	PodBridge = "cni0"
	// MaxNodes bounds a lab's size (the address plan has room for more;
	// the machine does not).
	MaxNodes = 4
)

// Node is one node's place in the layout.
type Node struct {
	Name       string // the Kubernetes node name, lab-node-<i> (1-based)
	NS         string // its network namespace
	IP         string // on the lab network: the node's InternalIP
	PodCIDR    string
	PodGateway string // the pod bridge's address, the pods' default route
	hubVeth    string // the hub side of its lab network link
}

// NodeName is the name of the i-th node (1-based).
func NodeName(i int) string { return fmt.Sprintf("lab-node-%d", i) }

// nodeNS is the network namespace of the i-th node.
func nodeNS(i int) string { return fmt.Sprintf("%s%d", NodeNSPrefix, i) }

// Nodes is the layout of a lab of n nodes.
func Nodes(n int) []Node {
	nodes := make([]Node, n)
	for i := range nodes {
		idx := i + 1
		nodes[i] = Node{
			Name: NodeName(idx), NS: nodeNS(idx),
			IP:      fmt.Sprintf("10.100.0.%d", 10+idx),
			PodCIDR: fmt.Sprintf("10.244.%d.0/24", idx), PodGateway: fmt.Sprintf("10.244.%d.1", idx),
			hubVeth: fmt.Sprintf("rpn%d", idx),
		}
	}
	return nodes
}

// NSPath is the file naming namespace ns, for nsenter --net.
func NSPath(ns string) string { return "/run/netns/" + ns }

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
	return IP(append([]string{"-n", ns}, args...)...)
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

// SetupHub creates the hub namespace and the lab network bridge. It is
// idempotent.
func SetupHub() error {
	if err := ensureNS(LabNetNS); err != nil {
		return err
	}
	steps := [][]string{{"link", "set", "lo", "up"}}
	if _, err := InNS(LabNetNS, "link", "show", LabBridge); err != nil {
		steps = append(steps, []string{"link", "add", LabBridge, "type", "bridge"})
	}
	steps = append(steps,
		[]string{"addr", "replace", HubIP + "/24", "dev", LabBridge},
		[]string{"link", "set", LabBridge, "up"})
	for _, s := range steps {
		if _, err := InNS(LabNetNS, s...); err != nil {
			return err
		}
	}
	return Sysctl(LabNetNS, "net.ipv4.ip_forward", "1")
}

// SetupNode creates node n's namespace and links it to the lab network:
// eth0 with the node IP, a default route to the hub, and its pod bridge
// with the pods' gateway address (the CNI bridge plugin adopts it). The hub
// routes the node's pod subnet through it, so the client host reaches pods
// directly (as a cloud VPC routes pod ranges).
//
// Traffic the node itself sends to Services and to other nodes' pods leaves
// with the pod gateway as its source, as an overlay network's node address
// does: inside the cluster CIDR, so kube-proxy does not masquerade it.
// (Masquerading uses fully random source ports, which would keep a packet
// capture from telling which connection of the prober's a packet is.)
func SetupNode(n Node, all []Node) error {
	if err := ensureNS(n.NS); err != nil {
		return err
	}
	peer := n.hubVeth + "p"
	if _, err := InNS(LabNetNS, "link", "show", n.hubVeth); err == nil {
		_, _ = InNS(LabNetNS, "link", "del", n.hubVeth)
	}
	for _, s := range [][]string{
		{"link", "add", n.hubVeth, "type", "veth", "peer", "name", peer, "netns", n.NS},
		{"link", "set", n.hubVeth, "master", LabBridge},
		{"link", "set", n.hubVeth, "up"},
		{"route", "replace", n.PodCIDR, "via", n.IP},
	} {
		if _, err := InNS(LabNetNS, s...); err != nil {
			return err
		}
	}
	steps := [][]string{
		{"link", "set", "lo", "up"},
		{"link", "set", peer, "name", "eth0"},
		{"addr", "add", n.IP + "/24", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"link", "add", PodBridge, "type", "bridge"},
		{"addr", "add", n.PodGateway + "/24", "dev", PodBridge},
		{"link", "set", PodBridge, "up"},
		{"route", "replace", "default", "via", HubIP},
		{"route", "replace", ServiceCIDR, "via", HubIP, "dev", "eth0", "src", n.PodGateway},
	}
	for _, o := range all {
		if o.Name != n.Name {
			steps = append(steps, []string{"route", "replace", o.PodCIDR, "via", o.IP, "src", n.PodGateway})
		}
	}
	for _, s := range steps {
		if _, err := InNS(n.NS, s...); err != nil {
			return err
		}
	}
	return Sysctl(n.NS, "net.ipv4.ip_forward", "1")
}

// Sysctl sets a network sysctl inside namespace ns (network sysctls are per
// namespace: the host's stay as they are).
func Sysctl(ns, key, value string) error {
	cmd := exec.Command("nsenter", "--net="+NSPath(ns), "sysctl", "-qw", key+"="+value)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("sysctl %s=%s in %s: %w: %s", key, value, ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func ensureNS(name string) error {
	if Exists(name) {
		return nil
	}
	_, err := IP("netns", "add", name)
	return err
}
