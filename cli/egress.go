package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/yaml"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/egress"
)

// Egress policies (spec.egress, package egress): sandbox create's
// --egress-allow, --egress-file and --egress-mode, and `shoal sandbox
// egress` to show and change a sandbox's policy.
//
// A rule on the command line is package egress's syntax (ParseRule:
// HOST[:PORT[,PORT...]], IPv6 in brackets), and a policy file is
// egress.Policy's JSON or YAML shape, which `sandbox egress show -o
// json|yaml` prints back. Every change is one UpdateSandbox call: the
// server's update loop is the compare-and-swap, and the server alone moves
// the policy's version (apiserver/egress.go), so a change made here never
// undoes one made meanwhile by someone else. --if-version makes it apply
// only to the sandbox as the caller saw it.

// ruleValues is a repeatable flag that keeps each value whole: urfave/cli's
// StringSlice splits its values on commas, and the ports of a rule are
// comma-separated (--egress-allow api.example.com:80,443 is one rule).
type ruleValues []string

func (r *ruleValues) Set(v string) error { *r = append(*r, v); return nil }
func (r *ruleValues) String() string {
	if r == nil {
		return ""
	}
	return strings.Join(*r, " ")
}

// ruleValuesOf is the values of a ruleValues flag.
func ruleValuesOf(c *cli.Context, name string) []string {
	if v, ok := c.Generic(name).(*ruleValues); ok && v != nil {
		return *v
	}
	return nil
}

// maxPolicyFileBytes bounds what --egress-file and --file read: a policy
// of egress.MaxRules rules is a few KiB.
const maxPolicyFileBytes = 1 << 20

// egressCreateFlags are sandbox create's egress flags.
func egressCreateFlags() []cli.Flag {
	return []cli.Flag{
		&cli.GenericFlag{Name: "egress-allow", Value: &ruleValues{}, Usage: "allow egress to `RULE`: HOST[:PORT[,PORT...]] (port 443 when none), repeatable; each value is one rule, commas and all"},
		&cli.StringFlag{Name: "egress-file", Usage: "the egress policy in `FILE`, YAML or JSON (rules: [{host, ports, cidrs}], mode), - for stdin; --egress-allow's rules are added to it"},
		&cli.StringFlag{Name: "egress-mode", Usage: "egress `MODE`: enforce (the default: refuse what no rule allows) or audit (allow everything, report what enforce would refuse); overrides the file's"},
	}
}

// egressOfCreate is the policy create's flags ask for; nil when they ask
// for none (no rules, mode enforce: the same as no policy).
func (a *app) egressOfCreate(c *cli.Context) (*shoalv1.EgressPolicy, error) {
	p, err := a.policyOf(policySource{
		rules: ruleValuesOf(c, "egress-allow"), rulesFrom: "--egress-allow",
		file: c.String("egress-file"), fileFlag: "--egress-file",
		mode: c.String("egress-mode"), modeSet: c.IsSet("egress-mode"), modeFlag: "--egress-mode",
	})
	if err != nil {
		return nil, err
	}
	if len(p.Rules) == 0 && p.Mode == egress.ModeEnforce {
		return nil, nil
	}
	return shoalv1.EgressPolicyOf(p), nil
}

// policySource is where a command's policy comes from: a policy file,
// rules written on the command line, and a mode, each named in errors as
// the command line gives it.
type policySource struct {
	rules          []string
	rulesFrom      string // "--egress-allow", or the command for positional RULEs
	file, fileFlag string
	mode, modeFlag string
	modeSet        bool
}

// policyOf reads and validates the policy s describes: the file's rules,
// then the command line's (repeats dropped), and the mode flag's mode over
// the file's. Errors are usage errors naming the flag or file and the
// rule; nothing is sent.
func (a *app) policyOf(s policySource) (egress.Policy, error) {
	var p egress.Policy
	if s.file != "" {
		fp, err := a.readPolicyFile(s.file, s.fileFlag)
		if err != nil {
			return egress.Policy{}, err
		}
		p = fp
	}
	for _, arg := range s.rules {
		r, err := egress.ParseRule(arg)
		if err != nil {
			return egress.Policy{}, usageError("%s: %v", s.rulesFrom, err)
		}
		if !slices.ContainsFunc(p.Rules, r.Equal) {
			p.Rules = append(p.Rules, r)
		}
	}
	if s.modeSet {
		m, err := egress.ParseMode(s.mode)
		if err != nil {
			return egress.Policy{}, usageError("%s: %q is not a mode: enforce or audit", s.modeFlag, s.mode)
		}
		p.Mode = m
	}
	if len(p.Rules) > egress.MaxRules {
		return egress.Policy{}, usageError("%d egress rules, at most %d", len(p.Rules), egress.MaxRules)
	}
	return p, nil
}

// readPolicyFile reads a policy file (- is stdin): egress.Policy's shape,
// in YAML or JSON, unknown fields refused (a misspelt "rule:" must not
// read as no rules, which is no network). Its version, if any, is the
// server's to set and is dropped.
func (a *app) readPolicyFile(path, flag string) (egress.Policy, error) {
	var r io.Reader = a.stdin
	name := "stdin"
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return egress.Policy{}, usageError("%s: %v", flag, err)
		}
		defer f.Close()
		r, name = f, path
	}
	data, err := io.ReadAll(io.LimitReader(r, maxPolicyFileBytes+1))
	if err != nil {
		return egress.Policy{}, usageError("%s %s: %v", flag, name, err)
	}
	if len(data) > maxPolicyFileBytes {
		return egress.Policy{}, usageError("%s %s: over %d bytes; a policy is a few KiB", flag, name, maxPolicyFileBytes)
	}
	var p egress.Policy
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		// sigs.k8s.io/yaml goes through JSON and says so at length.
		msg := err.Error()
		for _, prefix := range []string{"error unmarshaling JSON: ", "while decoding JSON: ", "json: "} {
			msg = strings.TrimPrefix(msg, prefix)
		}
		return egress.Policy{}, usageError("%s %s: not an egress policy (rules: [{host, ports, cidrs}], mode: enforce|audit): %s", flag, name, msg)
	}
	var rules []egress.Rule
	for i, r := range p.Rules {
		n, err := r.Normalized()
		if err != nil {
			return egress.Policy{}, usageError("%s %s: rules[%d] (host %q): %v", flag, name, i, r.Host, err)
		}
		if !slices.ContainsFunc(rules, n.Equal) {
			rules = append(rules, n)
		}
	}
	p.Rules, p.Version = rules, 0
	return p, nil
}

// policyDoc is a policy as `sandbox egress show -o json|yaml` prints it:
// egress.Policy's shape (what --egress-file and set --file read), every
// field present. The version is the server's: a file's is ignored.
type policyDoc struct {
	Rules   []egress.Rule `json:"rules"`
	Mode    egress.Mode   `json:"mode"`
	Version int64         `json:"version"`
}

// policyOfSandbox is the sandbox's policy as package egress has it (no
// policy: no rules, enforce, version 0).
func policyOfSandbox(sb *shoalv1.Sandbox) (egress.Policy, error) {
	p, err := sb.GetSpec().GetEgress().Policy("spec.egress")
	if err != nil {
		return egress.Policy{}, fmt.Errorf("sandbox %s: its stored egress policy does not read: %w", sb.GetMeta().GetName(), err)
	}
	return p, nil
}

const egressHelp = `A rule is HOST[:PORT[,PORT...]]: HOST is a DNS name (api.nvidia.com, matched
exactly), *.example.com (exactly one label before it), **.example.com (one or
more), an IP address or a CIDR; IPv6 goes in brackets ([fd00::1]:8080). With
no port a rule allows 443. Quote globs for the shell. Mode enforce (the
default) refuses every connection no rule allows; audit allows everything and
reports, as EgressAudited events, what enforce would refuse. No rules at all:
the sandbox has no network. Internal addresses (loopback, private ranges, the
cloud metadata service, the node's own) pass only when a rule's IP, CIDR or
cidrs name them.

Every change is one update of the sandbox, made by the server whatever else
changes it meanwhile; --if-version VERSION makes it apply only at that
resource version of the sandbox (exit 4 otherwise). A change moves the
policy's version when it changes the rules or the mode (or cuts
connections); it applies to new connections once the sandbox's node
enforces that version (--wait waits for it), and to open ones only with
--cut-connections.

Without -o it prints what changed and the new version; -o json|yaml prints
the sandbox.`

func (a *app) sandboxEgress() *cli.Command {
	show := a.egressShow()
	return &cli.Command{
		Name:  "egress",
		Usage: "show or change a sandbox's egress policy (what it may reach on the network)",
		UsageText: `shoal sandbox egress NAME                  (the same as show)
shoal sandbox egress show NAME
shoal sandbox egress set NAME RULE... | --file FILE | --none
shoal sandbox egress add NAME RULE...
shoal sandbox egress remove NAME RULE...
shoal sandbox egress mode NAME enforce|audit`,
		ArgsUsage: "NAME",
		Description: `Shows a sandbox's egress policy, or changes it live. A sandbox named like
a subcommand (show, set, add, remove, mode) is shown by
` + "`shoal sandbox egress show NAME`" + `.

` + egressHelp + `

  shoal sandbox egress agent
  shoal sandbox egress add agent api.openai.com '*.github.com:443,22' --wait
  shoal sandbox egress remove agent '*.github.com:22,443' --if-version 1234
  shoal sandbox egress set agent --file policy.yaml --cut-connections
  shoal sandbox egress mode agent audit`,
		Action:      show.Action,
		Subcommands: []*cli.Command{show, a.egressSet(), a.egressAdd(), a.egressRemove(), a.egressMode()},
	}
}

func (a *app) egressShow() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "show a sandbox's egress policy",
		ArgsUsage: "NAME",
		Description: `Shows the policy's mode, its version, the version the sandbox's node
enforces (pending while that is behind), the sandbox's resource version (for
--if-version) and the rules, one a line as the commands take them (a rule's
cidrs, which only a policy file can give, in parentheses).

-o json|yaml prints the policy in the shape --egress-file and
` + "`shoal sandbox egress set --file`" + ` read ({"rules": [{"host", "ports",
"cidrs"}], "mode", "version"}; the version is the server's and ignored when
read), so a policy can be copied:

  shoal sandbox egress show agent
  shoal sandbox egress show agent -o yaml > policy.yaml
  shoal sandbox create agent2 --egress-file policy.yaml`,
		Action: func(c *cli.Context) error {
			api, err := a.dialArgs(c, 1, "NAME")
			if err != nil {
				return err
			}
			sb, err := api.GetSandbox(c.Context, &shoalv1.GetSandboxRequest{Workspace: a.workspace, Name: c.Args().First()})
			if err != nil {
				return err
			}
			return a.out.egress(sb)
		},
	}
}

func (a *app) egressSet() *cli.Command {
	return &cli.Command{
		Name:      "set",
		Usage:     "replace a sandbox's egress policy",
		ArgsUsage: "NAME [RULE...]",
		Description: `Replaces the whole policy, its mode included: the RULEs, the rules of
--file with the RULEs added, or --none for no rules (no network). The mode is
--mode's, else the file's, else enforce.

` + egressHelp + `

  shoal sandbox egress set agent api.nvidia.com '**.github.com' pypi.org:443
  shoal sandbox egress set agent --file policy.yaml --mode audit
  shoal sandbox egress show agent -o yaml | shoal sandbox egress set agent2 -f -
  shoal sandbox egress set agent --none --cut-connections`,
		Flags: egressWriteFlags(
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "the policy in `FILE`, YAML or JSON as show -o yaml prints it (- for stdin); RULEs are added to it"},
			&cli.BoolFlag{Name: "none", Usage: "no rules: the sandbox gets no network"},
			&cli.StringFlag{Name: "mode", Usage: "the policy's `MODE`: enforce or audit (default: the file's, else enforce)"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() < 1 {
				return usageError("sandbox egress set takes NAME RULE..., NAME --file FILE or NAME --none")
			}
			rules := c.Args().Tail()
			given := len(rules) > 0 || c.IsSet("file")
			switch {
			case c.Bool("none") && given:
				return usageError("--none is a policy without rules: give no RULE and no --file with it")
			case !c.Bool("none") && !given:
				return usageError("sandbox egress set: give the RULEs, --file FILE, or --none for no rules (no network)")
			}
			p, err := a.policyOf(policySource{
				rules: rules, rulesFrom: "sandbox egress set",
				file: c.String("file"), fileFlag: "--file",
				mode: c.String("mode"), modeSet: c.IsSet("mode"), modeFlag: "--mode",
			})
			if err != nil {
				return err
			}
			return a.egressUpdate(c, &shoalv1.UpdateSandboxRequest{Name: c.Args().First(), SetEgress: shoalv1.EgressPolicyOf(p)})
		},
	}
}

func (a *app) egressAdd() *cli.Command {
	return &cli.Command{
		Name:      "add",
		Usage:     "add rules to a sandbox's egress policy",
		ArgsUsage: "NAME RULE...",
		Description: `Adds the RULEs the policy does not have yet; a rule it has already is left
as it is (and when all are, nothing changes: the version stays).

` + egressHelp + `

  shoal sandbox egress add agent api.nvidia.com
  shoal sandbox egress add agent 'registry.npmjs.org:443,80' --wait
  shoal sandbox egress add agent 172.17.0.1:8080 --if-version 1234`,
		Flags: egressWriteFlags(),
		Action: func(c *cli.Context) error {
			rules, err := egressRuleArgs(c, "add")
			if err != nil {
				return err
			}
			return a.egressUpdate(c, &shoalv1.UpdateSandboxRequest{Name: c.Args().First(), AddEgressRules: rules})
		},
	}
}

func (a *app) egressRemove() *cli.Command {
	return &cli.Command{
		Name:      "remove",
		Usage:     "remove rules from a sandbox's egress policy",
		ArgsUsage: "NAME RULE...",
		Description: `Removes each RULE, written as show prints it (the ports in any order; no
port is 443). A rule the policy does not have fails the whole command (exit 3)
and changes nothing. A rule with cidrs is removed with set (its cidrs have no
command-line form).

` + egressHelp + `

  shoal sandbox egress remove agent api.nvidia.com:443
  shoal sandbox egress remove agent '*.github.com' --cut-connections --wait`,
		Flags: egressWriteFlags(),
		Action: func(c *cli.Context) error {
			rules, err := egressRuleArgs(c, "remove")
			if err != nil {
				return err
			}
			return a.egressUpdate(c, &shoalv1.UpdateSandboxRequest{Name: c.Args().First(), RemoveEgressRules: rules})
		},
	}
}

func (a *app) egressMode() *cli.Command {
	return &cli.Command{
		Name:      "mode",
		Usage:     "set the mode of a sandbox's egress policy: enforce or audit",
		ArgsUsage: "NAME enforce|audit",
		Description: `enforce refuses every connection no rule allows; audit allows every
connection and reports the ones enforce would refuse as EgressAudited events
(` + "`shoal sandbox logs NAME --egress`" + `): for learning a policy, not for
running one. The rules stay as they are.

` + egressHelp + `

  shoal sandbox egress mode agent audit
  shoal sandbox egress mode agent enforce --cut-connections --wait`,
		Flags: egressWriteFlags(),
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, 2, "NAME enforce|audit"); err != nil {
				return err
			}
			m, err := egress.ParseMode(c.Args().Get(1))
			if err != nil || c.Args().Get(1) == "" {
				return usageError("sandbox egress mode: %q is not a mode: enforce or audit", c.Args().Get(1))
			}
			return a.egressUpdate(c, &shoalv1.UpdateSandboxRequest{Name: c.Args().First(), EgressMode: shoalv1.EgressModeOf(m)})
		},
	}
}

// egressWriteFlags are what every egress change takes, after extra.
func egressWriteFlags(extra ...cli.Flag) []cli.Flag {
	return append(extra,
		&cli.Int64Flag{Name: "if-version", Usage: "change the policy only at this resource `VERSION` of the sandbox (show prints it)"},
		&cli.BoolFlag{Name: "cut-connections", Usage: "also cut the sandbox's established egress connections (a change otherwise applies to new ones only)"},
		&cli.BoolFlag{Name: "wait", Usage: "return when the sandbox's node enforces the new version (exit 4 when the node says it will not, 5 at --timeout)"},
		&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "give up waiting after `DURATION`"},
	)
}

// egressRuleArgs is NAME RULE...'s rules, parsed: a bad one is a usage
// error naming it.
func egressRuleArgs(c *cli.Context, verb string) ([]*shoalv1.EgressRule, error) {
	if c.NArg() < 2 {
		return nil, usageError("sandbox egress %s takes NAME RULE... (got %d argument(s))", verb, c.NArg())
	}
	var rules []*shoalv1.EgressRule
	for _, arg := range c.Args().Tail() {
		r, err := egress.ParseRule(arg)
		if err != nil {
			return nil, usageError("sandbox egress %s: %v", verb, err)
		}
		rules = append(rules, shoalv1.EgressRuleOf(r))
	}
	return rules, nil
}

// egressUpdate makes one egress change: req (its name and egress fields
// set by the command; the common flags' here) in one UpdateSandbox call.
// It reads the sandbox first only to say what changed; the write does not
// depend on that read (--if-version is the caller's precondition).
func (a *app) egressUpdate(c *cli.Context, req *shoalv1.UpdateSandboxRequest) error {
	api, err := a.api()
	if err != nil {
		return err
	}
	req.Workspace = a.workspace
	req.ResourceVersion = c.Int64("if-version")
	req.CutEgressConnections = c.Bool("cut-connections")
	ctx, cancel := a.timeoutCtx(c)
	defer cancel()
	before, err := api.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Workspace: a.workspace, Name: req.Name})
	if err != nil {
		return err
	}
	sb, err := api.UpdateSandbox(ctx, req)
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.NotFound && strings.Contains(st.Message(), "no egress rule") {
			return &exitError{code: ExitNotFound, msg: st.Message(),
				hint: fmt.Sprintf("`shoal sandbox egress show %s` lists its rules as remove takes them", req.Name)}
		}
		return err
	}
	if a.out.format == formatTable {
		if err := a.out.egressChange(before, sb); err != nil {
			return err
		}
	}
	if c.Bool("wait") {
		var stop func(string)
		want := sb.GetSpec().GetEgress().GetVersion()
		if sb.GetStatus().GetEgressAppliedVersion() < want {
			stop = a.progress(fmt.Sprintf("waiting for sandbox %s's node to enforce egress version %d", req.Name, want))
		}
		cur, werr := a.waitEgress(ctx, api, sb)
		if stop != nil {
			stop("")
		}
		if cur != nil {
			sb = cur
		}
		if werr != nil {
			if a.out.format != formatTable {
				// What was written, so that a script sees the version.
				if err := a.out.sandbox(sb); err != nil {
					return err
				}
			}
			return werr
		}
		if a.out.format == formatTable {
			fmt.Fprintf(a.stdout, "sandbox %s: egress version %d enforced\n", req.Name, sb.GetStatus().GetEgressAppliedVersion())
		}
	}
	if a.out.format != formatTable {
		return a.out.sandbox(sb)
	}
	return nil
}

// waitEgress follows the sandbox until its node enforces the egress
// version sb has (status.egress_applied_version reached it: a later
// write's version counts too), and returns the sandbox as it then is,
// or as last seen with the error.
func (a *app) waitEgress(ctx context.Context, api shoalv1.ShoalClient, sb *shoalv1.Sandbox) (*shoalv1.Sandbox, error) {
	want := sb.GetSpec().GetEgress().GetVersion()
	name, uid := sb.GetMeta().GetName(), sb.GetMeta().GetUid()
	if sb.GetStatus().GetEgressAppliedVersion() >= want {
		return sb, nil
	}
	notEnforced := func(sb *shoalv1.Sandbox) error {
		why := egressNotEnforced(sb)
		if why == "" {
			return nil
		}
		return &exitError{code: ExitPrecondition,
			msg:  fmt.Sprintf("sandbox %s's node does not enforce its egress policy (%s); version %d is written", name, why, want),
			hint: fmt.Sprintf("`shoal sandbox describe %s` shows its node and conditions", name)}
	}
	if err := notEnforced(sb); err != nil {
		return sb, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// From 0: the sandbox as it is now, then every change.
	stream, err := api.WatchSandboxes(ctx, &shoalv1.WatchSandboxesRequest{Workspace: sb.GetMeta().GetWorkspace(), Name: name})
	if err != nil {
		return sb, err
	}
	last := sb
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("the watch of sandbox %s ended before its node enforced egress version %d", name, want)
			}
			if errors.Is(ctx.Err(), context.Canceled) {
				return last, &exitError{code: ExitError, msg: fmt.Sprintf("interrupted while waiting for sandbox %s's node to enforce egress version %d; the change is written", name, want)}
			}
			if ctx.Err() != nil || status.Code(err) == codes.DeadlineExceeded {
				return last, &exitError{code: ExitUnavailable,
					msg: fmt.Sprintf("timed out waiting for sandbox %s's node to enforce egress version %d (it enforces %d); the change is written",
						name, want, last.GetStatus().GetEgressAppliedVersion()),
					hint: fmt.Sprintf("raise --timeout, or see `shoal sandbox describe %s` for its node and phase", name)}
			}
			return last, err
		}
		cur := ev.GetSandbox()
		if ev.GetType() == shoalv1.EventType_DELETED || cur.GetMeta().GetUid() != uid {
			return last, &exitError{code: ExitNotFound, msg: fmt.Sprintf("sandbox %s was deleted before its node enforced egress version %d", name, want)}
		}
		last = cur
		if cur.GetStatus().GetEgressAppliedVersion() >= want {
			return cur, nil
		}
		if err := notEnforced(cur); err != nil {
			return cur, err
		}
	}
}

// egressChange says what one write changed between the sandbox read before
// it and the one it returned: the rules added (+) and removed (-), the
// mode, a cut, and the version; or that nothing changed.
func (p printer) egressChange(before, after *shoalv1.Sandbox) error {
	name := after.GetMeta().GetName()
	was, now := before.GetSpec().GetEgress().GetVersion(), after.GetSpec().GetEgress().GetVersion()
	if now == was {
		_, err := fmt.Fprintf(p.w, "sandbox %s: egress unchanged at version %d (resource version %d)\n", name, now, after.GetMeta().GetResourceVersion())
		return err
	}
	old, err := policyOfSandbox(before)
	if err != nil {
		return err
	}
	cur, err := policyOfSandbox(after)
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sandbox %s: egress version %d (was %d), resource version %d\n", name, now, was, after.GetMeta().GetResourceVersion())
	for _, r := range cur.Rules {
		if !slices.ContainsFunc(old.Rules, r.Equal) {
			fmt.Fprintf(&b, "  + %s\n", r)
		}
	}
	for _, r := range old.Rules {
		if !slices.ContainsFunc(cur.Rules, r.Equal) {
			fmt.Fprintf(&b, "  - %s\n", r)
		}
	}
	if cur.Mode != old.Mode {
		fmt.Fprintf(&b, "  mode %s (was %s)\n", cur.Mode, old.Mode)
	}
	if len(cur.Rules) == 0 && len(old.Rules) > 0 {
		b.WriteString("  no rules left: the sandbox has no network\n")
	}
	if cut := after.GetSpec().GetEgress().GetCutBelow(); cut == now && cut != before.GetSpec().GetEgress().GetCutBelow() {
		fmt.Fprintf(&b, "  connections admitted before version %d are cut\n", now)
	}
	_, err = io.WriteString(p.w, b.String())
	return err
}

// egress prints a sandbox's policy: fields and a rule a line, or the
// policy document (policyDoc) in JSON or YAML.
func (p printer) egress(sb *shoalv1.Sandbox) error {
	pol, err := policyOfSandbox(sb)
	if err != nil {
		return err
	}
	if p.format != formatTable {
		doc := policyDoc{Rules: pol.Rules, Mode: pol.Mode, Version: pol.Version}
		if doc.Rules == nil {
			doc.Rules = []egress.Rule{}
		}
		return p.structured(doc)
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	field := func(name, value string) { fmt.Fprintf(w, "%s:\t%s\n", name, value) }
	field("Sandbox", sb.GetMeta().GetName())
	field("Resource version", fmt.Sprint(sb.GetMeta().GetResourceVersion()))
	field("Mode", pol.Mode.String())
	version := fmt.Sprint(pol.Version)
	if pol.Version == 0 {
		version = "0 (no policy set)"
	}
	field("Version", version)
	field("Applied version", appliedLine(sb))
	if cut := sb.GetSpec().GetEgress().GetCutBelow(); cut > 0 {
		field("Cut below", fmt.Sprintf("%d (connections admitted before it were cut)", cut))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	writeRules(&b, "Rules", pol.Rules)
	_, err = io.WriteString(p.w, b.String())
	return err
}

// appliedLine is the version the sandbox's node enforces, and "pending"
// while it is behind the policy's, with why when the node said it will
// not enforce it.
func appliedLine(sb *shoalv1.Sandbox) string {
	s := fmt.Sprint(sb.GetStatus().GetEgressAppliedVersion())
	switch why := egressNotEnforced(sb); {
	case sb.EgressPending() && why != "":
		s += " (pending: not enforced by its node: " + why + ")"
	case sb.EgressPending():
		s += " (pending)"
	}
	return s
}

// egressNotEnforced is why the sandbox's node does not enforce its policy
// when the node says so (condition Egress False, agent/egress.go: say, a
// node without egress enforcement), as the server's create --wait reads
// it: nothing more is coming to wait for. "" when the node enforces it or
// may yet. NoRules is no such refusal: no rules, nothing to enforce.
func egressNotEnforced(sb *shoalv1.Sandbox) string {
	for _, c := range sb.GetStatus().GetConditions() {
		if c.GetType() == "Egress" && c.GetStatus() == "False" && c.GetReason() != "NoRules" {
			return oneLine(c.GetReason() + ": " + c.GetMessage())
		}
	}
	return ""
}

// writeRules writes a titled list of rules, one a line, as the commands
// take them.
func writeRules(b *strings.Builder, title string, rules []egress.Rule) {
	fmt.Fprintf(b, "%s:\n", title)
	if len(rules) == 0 {
		b.WriteString("  <none> (no network)\n")
	}
	for _, r := range rules {
		fmt.Fprintf(b, "  %s\n", r)
	}
}
