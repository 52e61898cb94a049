package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/cli"
	"shoal/docker"
	"shoal/events"
	"shoal/internal/testenv"
	"shoal/node"
)

// egressOf is a sandbox's policy as the server stores it.
func egressOf(t *testing.T, n *testenv.Node, name string) (*shoalv1.EgressPolicy, int64) {
	t.Helper()
	sb, err := n.Client.GetSandbox(context.Background(), &shoalv1.GetSandboxRequest{Name: name})
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	return sb.GetSpec().GetEgress(), sb.GetMeta().GetResourceVersion()
}

// rulesOf is a policy's rules in the CLI's syntax, in order.
func rulesOf(p *shoalv1.EgressPolicy) []string {
	var out []string
	for _, r := range p.GetRules() {
		s := r.GetHost() + ":"
		for i, port := range r.GetPorts() {
			if i > 0 {
				s += ","
			}
			s += fmt.Sprint(port)
		}
		for _, c := range r.GetCidrs() {
			s += " " + c
		}
		out = append(out, s)
	}
	return out
}

// The egress commands through the built binary, on a hollow node (the
// CLI and the API server only: no node enforces a policy here, so the
// applied version stays 0 and --wait is not asserted). Every write moves
// the version as the server says, a rule with several ports is one rule
// wherever it is written, show -o yaml reads back through --egress-file,
// and every refusal (a bad rule, a rule that is not there, a stale
// --if-version) exits with its code, names what was wrong and changes
// nothing.
func TestEgressThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	n := testenv.StartNode(t, cfg)
	ep := n.Addr()

	// create: repeated --egress-allow, a comma ports rule kept whole,
	// flags before and after the name.
	run(t, bin, ep, "sandbox", "create", "--egress-allow", "api.nvidia.com:443", "eg",
		"--egress-allow", "H.Example.com:443,80", "--egress-allow", "*.github.com").must(t, 0, "create --egress-allow")
	// The node's status writes move the resource version until the
	// sandbox is READY and the node has said what it does with the
	// policy (condition Egress); the commands below read it after.
	var sb *shoalv1.Sandbox
	testenv.Eventually(t, 20*time.Second, "sandbox eg READY with an Egress condition", func() bool {
		var err error
		sb, err = n.Client.GetSandbox(context.Background(), &shoalv1.GetSandboxRequest{Name: "eg"})
		return err == nil && sb.GetStatus().GetPhase() == shoalv1.SandboxPhase_READY &&
			slices.ContainsFunc(sb.GetStatus().GetConditions(), func(c *shoalv1.Condition) bool { return c.GetType() == "Egress" })
	})
	applied := fmt.Sprintf("Applied version:   %d", sb.GetStatus().GetEgressAppliedVersion())
	if sb.EgressPending() {
		applied += " (pending"
	}
	pol, rv := egressOf(t, n, "eg")
	if want := []string{"api.nvidia.com:443", "h.example.com:80,443", "*.github.com:443"}; !slices.Equal(rulesOf(pol), want) ||
		pol.GetVersion() != 1 || pol.GetMode() != shoalv1.EgressMode_EGRESS_MODE_ENFORCE {
		t.Fatalf("created policy: rules %q version %d mode %s; want %q, 1, ENFORCE", rulesOf(pol), pol.GetVersion(), pol.GetMode(), want)
	}

	// show, as a person reads it: both spellings, flags after the name.
	for _, args := range [][]string{{"sandbox", "egress", "eg"}, {"sandbox", "egress", "show", "eg"}} {
		r := run(t, bin, ep, args...).must(t, 0, strings.Join(args, " "))
		for _, want := range []string{"Mode:              enforce\n", "Version:           1\n", applied,
			fmt.Sprintf("Resource version:  %d\n", rv), "Rules:\n  api.nvidia.com:443\n  h.example.com:80,443\n  *.github.com:443\n"} {
			if !strings.Contains(r.stdout, want) {
				t.Fatalf("%s does not show %q:\n%s", strings.Join(args, " "), want, r.stdout)
			}
		}
	}

	// show -o yaml → --egress-file → show -o yaml: the same policy.
	dir := t.TempDir()
	shown := run(t, bin, ep, "sandbox", "egress", "eg", "-o", "yaml").must(t, 0, "egress show -o yaml").stdout
	file := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(file, []byte(shown), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, bin, ep, "sandbox", "create", "copy", "--egress-file", file).must(t, 0, "create --egress-file")
	if again := run(t, bin, ep, "-o", "yaml", "sandbox", "egress", "show", "copy").must(t, 0, "show the copy").stdout; again != shown {
		t.Fatalf("a policy read back through --egress-file differs:\n%s\nwant\n%s", again, shown)
	}
	// JSON from stdin, with its mode, and a rule added on the command line.
	js := run(t, bin, ep, "sandbox", "egress", "show", "eg", "-o", "json").must(t, 0, "egress show -o json").stdout
	var doc struct {
		Rules []struct {
			Host  string
			Ports []int
		}
		Mode    string
		Version int
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil || len(doc.Rules) != 3 || doc.Rules[1].Host != "h.example.com" ||
		!slices.Equal(doc.Rules[1].Ports, []int{80, 443}) || doc.Mode != "enforce" || doc.Version != 1 {
		t.Fatalf("show -o json: %v %+v\n%s", err, doc, js)
	}
	runWith(t, bin, ep, runOpts{stdin: strings.Replace(js, `"enforce"`, `"audit"`, 1)},
		"sandbox", "create", "copy2", "--egress-file", "-", "--egress-allow", "extra.io:8443,8080").must(t, 0, "create --egress-file -")
	pol2, _ := egressOf(t, n, "copy2")
	if want := append(rulesOf(pol), "extra.io:8080,8443"); !slices.Equal(rulesOf(pol2), want) || pol2.GetMode() != shoalv1.EgressMode_EGRESS_MODE_AUDIT {
		t.Fatalf("create from stdin: rules %q mode %s; want %q, AUDIT", rulesOf(pol2), pol2.GetMode(), want)
	}

	// add, at the version show printed: the version moves once.
	r := run(t, bin, ep, "sandbox", "egress", "add", "--if-version", fmt.Sprint(rv), "eg", "x.io:22,2222").must(t, 0, "egress add")
	if !strings.Contains(r.stdout, "egress version 2 (was 1)") || !strings.Contains(r.stdout, "  + x.io:22,2222\n") {
		t.Fatalf("egress add printed %q", r.stdout)
	}
	pol, _ = egressOf(t, n, "eg")
	if pol.GetVersion() != 2 || !slices.Contains(rulesOf(pol), "x.io:22,2222") {
		t.Fatalf("after add: %q version %d", rulesOf(pol), pol.GetVersion())
	}
	// A rule it has (ports in another order) changes nothing.
	r = run(t, bin, ep, "sandbox", "egress", "add", "eg", "x.io:2222,22").must(t, 0, "egress add of a rule it has")
	if !strings.Contains(r.stdout, "unchanged at version 2") {
		t.Fatalf("add of a rule it has printed %q", r.stdout)
	}

	// Refusals change nothing: a stale --if-version (4), a rule that is
	// not there (3), bad rules (2) on create, add, remove, set and in a
	// file.
	pol, rv2 := egressOf(t, n, "eg")
	r = run(t, bin, ep, "sandbox", "egress", "add", "eg", "y.io", "--if-version", fmt.Sprint(rv)).must(t, cli.ExitPrecondition, "add at a stale version")
	if !strings.Contains(r.stderr, fmt.Sprint(rv)) {
		t.Errorf("stale --if-version: stderr does not name the version: %s", r.stderr)
	}
	r = run(t, bin, ep, "sandbox", "egress", "remove", "eg", "x.io:22,2222", "nope.example.com").must(t, cli.ExitNotFound, "remove of an absent rule")
	if !strings.Contains(r.stderr, "nope.example.com:443") || !strings.Contains(r.stderr, "sandbox egress show eg") {
		t.Errorf("remove of an absent rule: stderr does not name the rule and show: %s", r.stderr)
	}
	badFile := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badFile, []byte("rules:\n- host: ok.io\n- host: '*.*.com'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"*.*.com", "host:0", "300.1.1.1", "a.io:65536", "[::1", "a.io:80,,443"} {
		for _, args := range [][]string{
			{"sandbox", "create", "bad", "--egress-allow", "ok.io", "--egress-allow", bad},
			{"sandbox", "egress", "add", "eg", "ok.io", bad},
			{"sandbox", "egress", "remove", "eg", bad},
			{"sandbox", "egress", "set", "eg", bad, "--mode", "audit"},
		} {
			r := run(t, bin, ep, args...)
			if r.code != cli.ExitUsage || !strings.Contains(r.stderr, fmt.Sprintf("%q", bad)) {
				t.Errorf("%q: exit %d, stderr %q; want exit %d naming the rule", args, r.code, r.stderr, cli.ExitUsage)
			}
			if args[1] == "create" && !strings.Contains(r.stderr, "--egress-allow") {
				t.Errorf("%q: stderr does not name the flag: %q", args, r.stderr)
			}
		}
	}
	for _, args := range [][]string{
		{"sandbox", "create", "bad", "--egress-file", badFile},
		{"sandbox", "egress", "set", "eg", "-f", badFile},
	} {
		r := run(t, bin, ep, args...)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "rules[1]") || !strings.Contains(r.stderr, "*.*.com") {
			t.Errorf("%q: exit %d, stderr %q; want exit %d naming rules[1]", args, r.code, r.stderr, cli.ExitUsage)
		}
	}
	if after, rv3 := egressOf(t, n, "eg"); rv3 != rv2 || !proto.Equal(after, pol) {
		t.Fatalf("a refused change wrote: resource version %d → %d, policy %v → %v", rv2, rv3, pol, after)
	}
	if _, err := n.Client.GetSandbox(context.Background(), &shoalv1.GetSandboxRequest{Name: "bad"}); err == nil {
		t.Fatal("a create with a bad rule made the sandbox")
	}

	// remove with a cut, mode, set, set --none: each one write, one
	// version more.
	r = run(t, bin, ep, "sandbox", "egress", "remove", "eg", "x.io:2222,22", "--cut-connections").must(t, 0, "egress remove")
	if !strings.Contains(r.stdout, "egress version 3 (was 2)") || !strings.Contains(r.stdout, "  - x.io:22,2222\n") || !strings.Contains(r.stdout, "before version 3 are cut") {
		t.Fatalf("egress remove printed %q", r.stdout)
	}
	if pol, _ := egressOf(t, n, "eg"); pol.GetVersion() != 3 || pol.GetCutBelow() != 3 || slices.Contains(rulesOf(pol), "x.io:22,2222") {
		t.Fatalf("after remove --cut-connections: %v", pol)
	}
	r = run(t, bin, ep, "sandbox", "egress", "mode", "eg", "audit").must(t, 0, "egress mode audit")
	if !strings.Contains(r.stdout, "egress version 4 (was 3)") || !strings.Contains(r.stdout, "mode audit (was enforce)") {
		t.Fatalf("egress mode printed %q", r.stdout)
	}
	r = run(t, bin, ep, "sandbox", "egress", "set", "eg", "a.io", "b.io:443,80", "--mode", "audit", "-o", "json").must(t, 0, "egress set -o json")
	var printed struct {
		Spec struct {
			Egress struct {
				Version string
				Mode    string
			}
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &printed); err != nil || printed.Spec.Egress.Version != "5" || printed.Spec.Egress.Mode != "EGRESS_MODE_AUDIT" {
		t.Fatalf("egress set -o json: %v %+v\n%s", err, printed, r.stdout)
	}
	if pol, _ := egressOf(t, n, "eg"); !slices.Equal(rulesOf(pol), []string{"a.io:443", "b.io:80,443"}) || pol.GetMode() != shoalv1.EgressMode_EGRESS_MODE_AUDIT {
		t.Fatalf("after set: %q %s", rulesOf(pol), pol.GetMode())
	}
	r = run(t, bin, ep, "sandbox", "egress", "set", "eg", "--none").must(t, 0, "egress set --none")
	if !strings.Contains(r.stdout, "egress version 6 (was 5)") || !strings.Contains(r.stdout, "mode enforce (was audit)") || !strings.Contains(r.stdout, "no network") {
		t.Fatalf("set --none printed %q", r.stdout)
	}
	if pol, _ := egressOf(t, n, "eg"); len(pol.GetRules()) != 0 || pol.GetVersion() != 6 {
		t.Fatalf("after set --none: %v", pol)
	}
	run(t, bin, ep, "sandbox", "egress", "set", "eg").must(t, cli.ExitUsage, "set without rules, --file or --none")
	run(t, bin, ep, "sandbox", "egress", "set", "eg", "a.io", "--none").must(t, cli.ExitUsage, "set RULE --none")
	run(t, bin, ep, "sandbox", "egress", "mode", "eg", "permissive").must(t, cli.ExitUsage, "mode permissive")
	run(t, bin, ep, "sandbox", "egress", "nope").must(t, cli.ExitNotFound, "egress of a missing sandbox")

	// describe shows the policy and the version applied.
	run(t, bin, ep, "sandbox", "egress", "set", "copy", "api.nvidia.com", "--mode", "audit").must(t, 0, "set on copy")
	d := run(t, bin, ep, "sandbox", "describe", "copy").must(t, 0, "describe").stdout
	if !strings.Contains(d, "Egress:            audit, version 2, applied ") || !strings.Contains(d, "Egress rules:\n  api.nvidia.com:443\n") {
		t.Fatalf("describe does not show the egress policy:\n%s", d)
	}
	// Names urfave/cli once took for its help subcommand are names.
	run(t, bin, ep, "sandbox", "create", "h", "--egress-allow", "h.io").must(t, 0, "create h")
	for _, args := range [][]string{{"sandbox", "egress", "h"}, {"sandbox", "egress", "show", "h"}, {"sandbox", "get", "h"}} {
		if r := run(t, bin, ep, args...).must(t, 0, strings.Join(args, " ")); !strings.Contains(r.stdout, "h.io:443") && !strings.Contains(r.stdout, "PROVISIONING") && !strings.Contains(r.stdout, "READY") {
			t.Fatalf("%s printed %q", strings.Join(args, " "), r.stdout)
		}
	}
	run(t, bin, ep, "sandbox", "egress", "add", "h", "help.io").must(t, 0, "egress add to h")
	if pol, _ := egressOf(t, n, "h"); !slices.Equal(rulesOf(pol), []string{"h.io:443", "help.io:443"}) {
		t.Fatalf("egress add h help.io: %q", rulesOf(pol))
	}
	run(t, bin, ep, "sandbox", "create", "plain").must(t, 0, "create without egress")
	if d := run(t, bin, ep, "sandbox", "describe", "plain").must(t, 0, "describe").stdout; strings.Contains(d, "Egress") {
		t.Fatalf("describe of a sandbox without a policy shows egress:\n%s", d)
	}
}

// `sandbox logs NAME --egress` shows the sandbox's egress events and no
// others, the newest --tail of them, and with -f the new ones as they are
// recorded. The events are recorded here as the node's agent would
// (events.Recorder, into the node's store): no node enforces egress yet.
func TestEgressLogsThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	n := testenv.StartNode(t, cfg)
	ep := n.Addr()

	run(t, bin, ep, "sandbox", "create", "eg", "--egress-allow", "api.nvidia.com").must(t, 0, "create")
	sb, err := n.Client.GetSandbox(context.Background(), &shoalv1.GetSandboxRequest{Name: "eg"})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := events.New(events.Config{Node: cfg.ID, Log: n.Store().EventLog()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { rec.Start(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })

	// None yet: the sandbox has other events (Scheduled), none of egress.
	testenv.Eventually(t, 10*time.Second, "the sandbox's Scheduled event", func() bool {
		return slices.Contains(reasons(listEvents(t, bin, ep, "sandbox", "events", "eg")), "Scheduled")
	})
	r := run(t, bin, ep, "sandbox", "logs", "eg", "--egress").must(t, 0, "logs --egress without egress events")
	if r.stdout != "" || !strings.Contains(r.stderr, "no egress events of sandbox eg") || !strings.Contains(r.stderr, "sampled") {
		t.Fatalf("logs --egress without events: stdout %q stderr %q", r.stdout, r.stderr)
	}

	follow := followEvents(t, bin, ep, "sandbox", "logs", "--egress", "eg", "-f")
	rec.Record(sb, events.Event{Reason: events.EgressApplied, Message: "enforcing egress version 1"})
	rec.Record(sb, events.Event{Reason: events.EgressRefused, Message: "refused evil.example.com:443: no rule admits it"})
	rec.Record(sb, events.Event{Reason: events.Stopped, Message: "not an egress event"})
	rec.Record(sb, events.Event{Reason: events.EgressAudited, Message: "audited other.example.com:443"})
	want := []string{"EgressApplied", "EgressRefused", "EgressAudited"}
	testenv.Eventually(t, 10*time.Second, "the egress events listed", func() (bool, error) {
		got := reasons(listEvents(t, bin, ep, "sandbox", "logs", "eg", "--egress"))
		return slices.Equal(got, want), errors.New(strings.Join(got, ","))
	})
	testenv.Eventually(t, 10*time.Second, "the egress events followed", func() (bool, error) {
		got := reasons(follow.seen())
		return slices.Equal(got, want), errors.New(strings.Join(got, ","))
	})
	// The other event was written too (before the last egress one), and
	// left out of both.
	if !slices.Contains(reasons(listEvents(t, bin, ep, "sandbox", "events", "eg")), "Stopped") {
		t.Fatal("the non-egress event was not recorded: the filter is not what left it out")
	}

	r = run(t, bin, ep, "sandbox", "logs", "eg", "--egress", "--tail", "1").must(t, 0, "logs --egress --tail 1")
	if !strings.Contains(r.stdout, "EgressAudited") || strings.Contains(r.stdout, "EgressRefused") || !strings.Contains(r.stderr, "2 older egress events are not shown (--tail)") {
		t.Fatalf("logs --egress --tail 1: stdout %q stderr %q", r.stdout, r.stderr)
	}
	r = run(t, bin, ep, "sandbox", "logs", "eg", "--egress").must(t, 0, "logs --egress")
	if !strings.Contains(r.stdout, "REASON") || !strings.Contains(r.stdout, "refused evil.example.com:443") || strings.Contains(r.stdout, "Scheduled") || strings.Contains(r.stdout, "Stopped") {
		t.Fatalf("logs --egress:\n%s", r.stdout)
	}
	run(t, bin, ep, "sandbox", "logs", "eg", "--egress", "--tail", "-1").must(t, cli.ExitUsage, "--tail -1")
}

// On a node that enforces egress (Docker, with the sidecar image), --wait
// returns once the node enforces the version written, a policy with no
// rules included; the node's own events read back through logs --egress:
// EgressApplied for each version, EgressRefused for a connection no rule
// admits. On a node that says it will not enforce (condition Egress
// False), --wait ends at once with exit 4.
func TestEgressWaitThroughBinary(t *testing.T) {
	dc := testenv.RequireDocker(t)
	if _, err := dc.ImageInspect(context.Background(), docker.DefaultEgressImage); err != nil {
		t.Fatalf("the egress sidecar image %s is missing (run `make image`): %v", docker.DefaultEgressImage, err)
	}
	t.Parallel()
	bin := testenv.Binary(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ep := n.Addr()

	run(t, bin, ep, "sandbox", "create", "w", "--egress-allow", "api.nvidia.com", "--wait").must(t, 0, "create --egress-allow --wait")
	r := run(t, bin, ep, "sandbox", "egress", "add", "w", "pypi.org:443,80", "--wait").must(t, 0, "egress add --wait")
	if !strings.Contains(r.stdout, "egress version 2 (was 1)") || !strings.Contains(r.stdout, "sandbox w: egress version 2 enforced\n") {
		t.Fatalf("egress add --wait printed %q", r.stdout)
	}
	if sb, err := n.Client.GetSandbox(context.Background(), &shoalv1.GetSandboxRequest{Name: "w"}); err != nil || sb.GetStatus().GetEgressAppliedVersion() < 2 {
		t.Fatalf("after egress add --wait returned: %v, applied version %d; want at least 2", err, sb.GetStatus().GetEgressAppliedVersion())
	}
	if r := run(t, bin, ep, "sandbox", "egress", "w").must(t, 0, "egress show"); !strings.Contains(r.stdout, "Applied version:   2\n") {
		t.Fatalf("egress show after --wait:\n%s", r.stdout)
	}

	// A connection no rule admits: the node refuses it and records it.
	run(t, bin, ep, "sandbox", "exec", "w", "--", "sh", "-c", "timeout 10 wget -q -O - http://refused.example.com:8080/ || true").must(t, 0, "a refused connection")
	testenv.Eventually(t, 20*time.Second, "EgressApplied twice and EgressRefused in logs --egress", func() (bool, error) {
		evs := listEvents(t, bin, ep, "sandbox", "logs", "w", "--egress")
		for _, ev := range evs {
			if ev.Reason == "EgressRefused" && !strings.Contains(ev.Message, "refused.example.com") {
				return false, fmt.Errorf("EgressRefused does not name the host: %q", ev.Message)
			}
		}
		got := only(evs, "EgressApplied", "EgressRefused")
		return slices.Equal(got, []string{"EgressApplied", "EgressApplied", "EgressRefused"}), errors.New(strings.Join(reasons(evs), ","))
	})

	r = run(t, bin, ep, "-o", "json", "sandbox", "egress", "set", "w", "--none", "--wait").must(t, 0, "egress set --none --wait")
	var printed struct {
		Spec   struct{ Egress struct{ Version string } }
		Status struct {
			EgressAppliedVersion string `json:"egress_applied_version"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &printed); err != nil || printed.Spec.Egress.Version != "3" || printed.Status.EgressAppliedVersion != "3" {
		t.Fatalf("set --none --wait -o json: %v %+v\n%s", err, printed, r.stdout)
	}
	run(t, bin, ep, "sandbox", "delete", "w", "--wait").must(t, 0, "delete")

	// A hollow node has no sidecars: it says so, and --wait does not wait.
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	h := testenv.StartNode(t, cfg)
	run(t, bin, h.Addr(), "sandbox", "create", "h", "--egress-allow", "api.nvidia.com", "--wait").must(t, 0, "create on a hollow node")
	start := time.Now()
	r = run(t, bin, h.Addr(), "sandbox", "egress", "add", "h", "pypi.org", "--wait").must(t, cli.ExitPrecondition, "egress add --wait on a hollow node")
	if !strings.Contains(r.stderr, "does not enforce") || !strings.Contains(r.stderr, "version 2 is written") || time.Since(start) > time.Minute {
		t.Fatalf("egress add --wait on a hollow node (%s): stderr %q", time.Since(start), r.stderr)
	}
	if r := run(t, bin, h.Addr(), "sandbox", "egress", "h").must(t, 0, "egress show"); !strings.Contains(r.stdout, "(pending: not enforced by its node: ") {
		t.Fatalf("egress show on a hollow node:\n%s", r.stdout)
	}
}
