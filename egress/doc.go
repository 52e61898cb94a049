// Package egress is what a sandbox may reach on the network (issue 25):
// its policy, the matching of a destination against it, and the node's
// proxy that enforces it. The shim a sandbox's proxy connections cross
// is package egress/shim (cmd/shoal-egress-shim). Nothing here knows
// etcd, Docker or the API: the agent wires it (below, "Wiring").
//
// # The policy
//
// A Policy is a list of Rules, a Mode and the Version that set it. A rule
// admits connections to a host on some ports (443 when it names none):
// the host is an exact DNS name (case-insensitive), *.example.com (exactly
// one label before .example.com), **.example.com (one or more), an IP
// address or a CIDR (matched against the address a client names); its
// optional CIDRs are where the host's resolved address must lie. The CLI
// writes a rule HOST[:PORT[,PORT...]] (ParseRule; IPv6 in brackets,
// [::1]:8080); a policy file is YAML of Policy's JSON tags (rules: [{host,
// ports, cidrs}], mode: enforce|audit). Validate bounds a policy
// (MaxRules, MaxHostBytes, MaxPortsPerRule, MaxCIDRsPerRule) and its
// errors are shoal KindInvalid errors naming the rule (egress.rules[i]).
// No rules is no egress at all: the sandbox keeps today's network.
//
// ModeEnforce (the default) refuses what no rule admits. ModeAudit admits
// everything and reports what enforce would have refused (VerdictAudit):
// it is for learning a policy, and protects nothing, the SSRF check
// included.
//
// # The check
//
// A connection to host:port is admitted when a rule matches host and port
// (Policy.Match, MatchAll) and admits one of the host's resolved addresses
// (Policy.Allowed). The proxy resolves the name itself and dials the
// address it checked, so a name that resolves differently a moment later
// (DNS rebinding) changes nothing. Allowed is the SSRF check: an address
// that is loopback, link-local (169.254.169.254, the cloud metadata
// service, among them), private (RFC 1918, CGNAT 100.64/10, IPv6 ULA) or
// one of the node's own (Classify) passes only when the rule's ranges
// name it: its CIDRs, or its host when that is an IP or a CIDR
// (--egress-allow 172.17.0.1:8080 admits that node-local service and
// nothing else internal). Unspecified (0.0.0.0 reaches the node's
// loopback on Linux), multicast and reserved addresses never pass. IPv4
// addresses dressed as IPv6 (::ffff:127.0.0.1, 64:ff9b::7f00:1) are
// classified as the IPv4 address they carry. CIDRs are taken literally:
// 0.0.0.0/0 lets everything past for that rule's host.
//
// # Enforcement: no network, a shim, and a socket per sandbox
//
//   - A sandbox with egress rules keeps Docker network mode none: its
//     namespace has only loopback, no route to the host, to other
//     sandboxes or anywhere else, so every host port (the node's API,
//     etcd client and peer ports, metrics) is unreachable by construction,
//     not by a firewall rule that could be missed. (A docker network
//     created --internal was tried and is not enough: its containers still
//     reach any host service listening on 0.0.0.0 through the gateway.)
//   - Beside it the agent runs a sidecar container in the sandbox's
//     network namespace (NetworkMode container:<sandbox>), running
//     shoal-egress-shim --listen 127.0.0.1:3128 --socket PATH --pass: it
//     accepts the sandbox's connections there and hands each (its
//     descriptor, SCM_RIGHTS: shim.Pass) to the node over a unix socket
//     the node listens on for that sandbox alone, so that the node's
//     proxy reads and writes the sandbox's connection itself and relays
//     it to the upstream (one relay; without --pass the shim relays the
//     bytes instead, shim.Forward, which the proxy also serves). One
//     socket connection carries every descriptor while it works: a socket
//     file per sandbox in the node's data directory, bind-mounted into the
//     sidecar only, never into the sandbox. The sandbox is given
//     HTTP_PROXY, HTTPS_PROXY, http_proxy and https_proxy =
//     http://127.0.0.1:3128 and NO_PROXY=localhost,127.0.0.1.
//   - The node runs one Proxy, and for each sandbox with rules a
//     Proxy.Serve on that sandbox's socket. The socket a connection
//     arrives on is the sandbox's identity: nothing the sandbox sends is
//     trusted for it, and the sandbox can neither reach another sandbox's
//     socket (no mounts of it) nor forge its way around loopback (no
//     NET_ADMIN, no NET_RAW).
//   - The proxy speaks HTTP CONNECT (TLS, and any TCP) and forwards plain
//     absolute-form http:// requests (one request per connection: it asks
//     the origin for Connection: close and relays the answer, 100 Continue
//     included, as it comes). It reads the sandbox's current policy for
//     every connection, matches, resolves, checks (above), and dials from
//     the node's network namespace. A refusal is a 403 with a one-line
//     reason (CONNECT and http:// alike, then the connection closes); a
//     malformed request is a 400, a host that does not resolve or answer
//     a 502, a fenced node a 503.
//
// Sandboxes have no DNS of their own (no resolver is reachable from a
// network-less namespace); the proxy resolves the names clients pass it.
// DNS exfiltration from inside is therefore impossible: the proxy looks
// up only names a rule already matches (a refused name is never
// resolved), so a ** rule lets a sandbox cause lookups of names under its
// domain, and nowhere else. In audit mode every name a client asks for is
// looked up.
//
// # Live changes, fencing, shutdown
//
// Policies (the agent's view of its sandboxes' policies) is asked once
// per connection, so a policy change applies from the next connection
// on, as soon as the agent has it. Established tunnels are not cut by a
// policy change (a long download or an SSH session outlives the edit, as
// with Kubernetes NetworkPolicy implementations that keep conntrack
// entries); cancelling the sandbox's Serve cuts them, which is how a flag
// asking for it would be wired. Every connection's outcome goes to
// OnDecision with the policy Version that decided, so that admission can
// be checked against the policy writes that preceded it.
//
// Fenced, when it says true (the node lost its lease), refuses every new
// connection with a 503; open tunnels are left to the freeze of the
// sandbox that fencing already does. Serve returns once every connection
// it accepted is done: the end of its context closes the listener and
// every open connection; each relay is two shim.Copy calls between the
// connections as accepted and dialled, half-closing (CloseWrite) on a
// clean end, through buffers held only while bytes flow (faster here than
// Linux's splice: docs/benchmarks.md has the figures).
//
// # Wiring
//
// The sandbox spec's egress field and its versioned writes are the API's
// (api/shoal/v1/egress.go converts, apiserver/egress.go validates and
// versions inside the update loop); the agent serves each sandbox's socket
// and keeps its sidecar (agent/egress.go: also the applied version, the
// Egress condition, events and metrics); the sidecar's container is
// docker/egress.go's, its image deploy/egress's (make image).
package egress
