package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/proto"

	shoalv1 "shoal/api/shoal/v1"
)

// `shoal sandbox describe NAME`: everything about one sandbox on one page,
// as `kubectl describe` shows a pod: its spec and status, its conditions,
// its node, the providers it holds (credential keys only) and its last
// events. It is assembled here from the API's reads (get, the node, each
// provider, the events), so a viewer can run it; a part that cannot be read
// is named in its place and on stderr, and the rest is shown.

// describeEvents is how many of the newest events describe shows by
// default.
const describeEvents = 25

func (a *app) sandboxDescribe() *cli.Command {
	return &cli.Command{
		Name:      "describe",
		Usage:     "show a sandbox with its node, providers and last events",
		ArgsUsage: "NAME",
		Description: `Shows everything about one sandbox, as kubectl describe does: spec and status,
conditions, the node it is placed on, its egress policy when it has one (mode,
version, the version its node enforces, rules), the providers it holds
(credential keys only, never values) and its last events (this incarnation's:
its uid).

-o json|yaml prints one object: {"sandbox", "node", "providers", "events",
"events_omitted"}; the node is null, and a provider is left out with a
warning on stderr, when it cannot be read.

  shoal sandbox describe agent
  shoal sandbox describe agent --events 100 -o yaml`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "events", Value: describeEvents, Usage: "show the newest `N` events (0: none)"},
		},
		Action: func(c *cli.Context) error {
			api, err := a.dialArgs(c, 1, "NAME")
			if err != nil {
				return err
			}
			if n := c.Int("events"); n < 0 || n > 5000 {
				return usageError("--events: %d is not between 0 and 5000", n)
			}
			sb, err := api.GetSandbox(c.Context, &shoalv1.GetSandboxRequest{Workspace: a.workspace, Name: c.Args().First()})
			if err != nil {
				return err
			}
			d := description{Sandbox: sb}
			var problems []string
			if node := sandboxNode(sb); node != "" {
				cl, err := a.clusterAPI()
				if err == nil {
					d.Node, err = cl.GetNode(c.Context, &shoalv1.GetNodeRequest{Name: node})
				}
				if err != nil {
					problems = append(problems, fmt.Sprintf("node %s: %s", node, a.classify(err).msg))
				}
			}
			for _, name := range sb.GetSpec().GetProviders() {
				p, err := api.GetProvider(c.Context, &shoalv1.GetProviderRequest{Workspace: sb.GetMeta().GetWorkspace(), Name: name})
				if err != nil {
					problems = append(problems, fmt.Sprintf("provider %s: %s", name, a.classify(err).msg))
					d.missing = append(d.missing, name)
					continue
				}
				d.Providers = append(d.Providers, p)
			}
			if n := c.Int("events"); n > 0 {
				resp, err := api.ListEvents(c.Context, &shoalv1.ListEventsRequest{Workspace: sb.GetMeta().GetWorkspace(),
					Sandbox: sb.GetMeta().GetName(), SandboxUid: sb.GetMeta().GetUid(), Limit: int32(n)})
				if err != nil {
					problems = append(problems, "events: "+a.classify(err).msg)
					d.eventsErr = true
				}
				d.Events, d.Omitted = resp.GetItems(), resp.GetOmitted()
			}
			a.out.warnings(problems)
			if a.out.format != formatTable {
				return a.out.description(d)
			}
			return a.out.describe(d)
		},
	}
}

// description is what describe shows.
type description struct {
	Sandbox   *shoalv1.Sandbox
	Node      *shoalv1.Node
	Providers []*shoalv1.Provider
	Events    []*shoalv1.Event
	Omitted   int32

	missing   []string // providers that could not be read
	eventsErr bool
}

// description prints d as one JSON or YAML object, each API object in it
// as get prints it (protojson, proto field names).
func (p printer) description(d description) error {
	enc := func(m proto.Message) json.RawMessage {
		if m == nil || !m.ProtoReflect().IsValid() {
			return json.RawMessage("null")
		}
		b, err := pjCompact.Marshal(m)
		if err != nil {
			return json.RawMessage("null")
		}
		return b
	}
	list := func(n int, at func(int) proto.Message) []json.RawMessage {
		out := make([]json.RawMessage, n)
		for i := range n {
			out[i] = enc(at(i))
		}
		return out
	}
	doc := struct {
		Sandbox       json.RawMessage   `json:"sandbox"`
		Node          json.RawMessage   `json:"node"`
		Providers     []json.RawMessage `json:"providers"`
		Events        []json.RawMessage `json:"events"`
		EventsOmitted int32             `json:"events_omitted"`
	}{
		Sandbox:       enc(d.Sandbox),
		Node:          enc(d.Node),
		Providers:     list(len(d.Providers), func(i int) proto.Message { return d.Providers[i] }),
		Events:        list(len(d.Events), func(i int) proto.Message { return d.Events[i] }),
		EventsOmitted: d.Omitted,
	}
	compact, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	var out []byte
	if p.format == formatYAML {
		out, err = yamlDoc(compact)
	} else {
		out, err = jsonDoc(compact)
	}
	if err != nil {
		return err
	}
	_, err = p.w.Write(out)
	return err
}

// describe prints d as kubectl describe does: "Field:  value" lines, and
// indented tables for the parts that are lists.
func (p printer) describe(d description) error {
	var buf bytes.Buffer
	w := tabwriter.NewWriter(&buf, 0, 8, 2, ' ', 0)
	sb := d.Sandbox
	m, spec, st := sb.GetMeta(), sb.GetSpec(), sb.GetStatus()
	field := func(name, value string) { fmt.Fprintf(w, "%s:\t%s\n", name, value) }
	field("Name", m.GetName())
	field("Workspace", m.GetWorkspace())
	field("UID", m.GetUid())
	field("Labels", kv(m.GetLabels()))
	field("Annotations", kv(m.GetAnnotations()))
	field("Created", p.when(m.GetCreatedAt()))
	if m.GetDeletionTimestamp() != nil {
		field("Deletion requested", p.when(m.GetDeletionTimestamp()))
	}
	field("Resource version", fmt.Sprint(m.GetResourceVersion()))
	field("Phase", strings.TrimPrefix(st.GetPhase().String(), "SANDBOX_PHASE_"))
	if st.GetMessage() != "" {
		field("Message", oneLine(st.GetMessage()))
	}
	if st.GetPhase() == shoalv1.SandboxPhase_STOPPED || st.GetExitCode() != 0 {
		field("Exit code", fmt.Sprint(st.GetExitCode()))
	}
	field("Node", p.nodeLine(sb, d.Node))
	if spec.GetNode() != "" && st.GetNode() != "" && st.GetNode() != spec.GetNode() {
		field("Observed on", st.GetNode())
	}
	if len(spec.GetNodeSelector()) > 0 {
		field("Node selector", kv(spec.GetNodeSelector()))
	}
	field("Container", orNone(st.GetContainerId()))
	field("Image", spec.GetImage())
	command := "<the image's>"
	if len(spec.GetCommand()) > 0 {
		command = strings.Join(spec.GetCommand(), " ")
	}
	field("Command", command)
	field("Env", kv(spec.GetEnv()))
	field("Resources", resourcesLine(spec.GetResources()))
	field("Read-only root", fmt.Sprint(spec.GetReadOnlyRoot()))
	var rules strings.Builder
	if spec.GetEgress() != nil {
		pol, err := policyOfSandbox(sb)
		if err != nil {
			return err
		}
		field("Egress", fmt.Sprintf("%s, version %d, applied %s", pol.Mode, pol.Version, appliedLine(sb)))
		writeRules(&rules, "Egress rules", pol.Rules)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	buf.WriteString(rules.String())

	section := func(title string, header []string, rows [][]string, empty string) {
		fmt.Fprintf(&buf, "%s:\n", title)
		if len(rows) == 0 {
			fmt.Fprintf(&buf, "  %s\n", empty)
			return
		}
		tw := tabwriter.NewWriter(&buf, 0, 8, 2, ' ', 0)
		fmt.Fprintf(tw, "  %s\n", strings.Join(header, "\t"))
		for _, r := range rows {
			fmt.Fprintf(tw, "  %s\n", strings.Join(r, "\t"))
		}
		tw.Flush()
	}

	var rows [][]string
	for _, c := range st.GetConditions() {
		rows = append(rows, []string{c.GetType(), c.GetStatus(), orNone(c.GetReason()), p.age(c.GetLastTransitionTime()), oneLine(c.GetMessage())})
	}
	section("Conditions", []string{"TYPE", "STATUS", "REASON", "AGE", "MESSAGE"}, rows, "<none>")

	rows = nil
	for _, pr := range d.Providers {
		keys := slices.Sorted(maps.Keys(pr.GetCredentials()))
		for i, k := range keys {
			keys[i] = k + "=<redacted>"
		}
		state := "Active"
		if pr.GetMeta().GetDeletionTimestamp() != nil {
			state = "Terminating"
		}
		rows = append(rows, []string{pr.GetMeta().GetName(), pr.GetType().String(), list(keys), state})
	}
	for _, name := range d.missing {
		rows = append(rows, []string{name, "?", "<could not be read>", "?"})
	}
	section("Providers", []string{"NAME", "TYPE", "CREDENTIALS", "STATE"}, rows, "<none>")

	rows = nil
	for _, ev := range d.Events {
		rows = append(rows, []string{p.lastSeen(ev), severityName(ev.GetSeverity()), ev.GetReason(), eventSource(ev), oneLine(ev.GetMessage())})
	}
	title := "Events"
	if d.Omitted > 0 {
		title = fmt.Sprintf("Events (the newest %d; %d older not shown, --events)", len(d.Events), d.Omitted)
	}
	empty := "<none>"
	if d.eventsErr {
		empty = "<could not be read>"
	}
	section(title, []string{"LAST SEEN", "TYPE", "REASON", "FROM", "MESSAGE"}, rows, empty)
	_, err := io.Copy(p.w, &buf)
	return err
}

// nodeLine is the sandbox's node with what the registry says of it.
func (p printer) nodeLine(sb *shoalv1.Sandbox, n *shoalv1.Node) string {
	name := sandboxNode(sb)
	if name == "" {
		return "<none>"
	}
	if n == nil {
		return name
	}
	state := "NotReady"
	if n.GetStatus().GetReady() {
		state = "Ready"
	}
	if n.GetStatus().GetCordoned() {
		state += ",Cordoned"
	}
	line := fmt.Sprintf("%s (%s", name, state)
	if !n.GetStatus().GetReady() && n.GetStatus().GetLastSeen() != nil {
		line += ", last seen " + p.age(n.GetStatus().GetLastSeen()) + " ago"
	}
	if n.GetAddress() != "" {
		line += ", " + n.GetAddress()
	}
	return line + ")"
}

// when is a time and how long ago it was.
func (p printer) when(ts interface{ AsTime() time.Time }) string {
	if ts == nil {
		return "<unknown>"
	}
	return fmt.Sprintf("%s (%s ago)", ts.AsTime().UTC().Format(time.RFC3339), p.age(ts))
}

func resourcesLine(r *shoalv1.Resources) string {
	cpu, mem := "<node default>", "<node default>"
	if r.GetCpuMillis() > 0 {
		cpu = fmt.Sprintf("%dm", r.GetCpuMillis())
	}
	if r.GetMemoryBytes() > 0 {
		mem = fmt.Sprintf("%d MiB", r.GetMemoryBytes()>>20)
	}
	return fmt.Sprintf("cpu %s, memory %s", cpu, mem)
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
