package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	shoalv1 "shoal/api/shoal/v1"
)

// Output formats.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

func validFormat(f string) error {
	switch f {
	case formatTable, formatJSON, formatYAML:
		return nil
	}
	return usageError("-o/--output: %q is not one of table, json, yaml", f)
}

// printer writes everything the CLI shows the user: objects and lists to
// w (stdout, machine-readable with -o json|yaml), warnings and errors to
// errw (stderr), so that scripts can parse stdout whatever else is said.
type printer struct {
	w, errw io.Writer
	format  string
	now     func() time.Time
}

// pjCompact marshals API objects with their proto field names; output.go's
// writers indent it (protojson varies its whitespace on purpose, so that
// nobody relies on it: what shoal prints is indented by json.Indent, stable).
var pjCompact = protojson.MarshalOptions{UseProtoNames: true}

// shape is how -o json|yaml wraps what a command prints. The command picks
// it, never the number of objects, so a script parsing `list` output sees
// the same structure for zero, one or many items.
type shape int

const (
	bare     shape = iota // get, create, update, watch events: the object itself
	itemList              // list: {"items": [...]}, also for zero or one item
)

// object prints one object the way get prints it: bare in JSON/YAML.
func (p printer) object(m proto.Message) error {
	return p.objects(bare, nil, nil, m)
}

// objects prints msgs as a table of rows, or as JSON/YAML in shape s.
func (p printer) objects(s shape, header []string, rows [][]string, msgs ...proto.Message) error {
	switch p.format {
	case formatJSON, formatYAML:
		if s == bare && len(msgs) != 1 {
			return fmt.Errorf("internal error: a bare object print got %d objects", len(msgs))
		}
		doc, item := forms(p.format)
		obj := func(i int) printable { return printable{m: msgs[i]} }
		if s == bare {
			b, err := renderAll(1, obj, doc)
			if err != nil {
				return err
			}
			_, err = p.w.Write(b[0])
			return err
		}
		items, err := renderAll(len(msgs), obj, item)
		if err != nil {
			return err
		}
		return writeItems(bufio.NewWriterSize(p.w, 64<<10), p.format, items)
	}
	t := tablewriter.NewTable(p.w,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders:  tw.BorderNone,
			Settings: tw.Settings{Separators: tw.SeparatorsNone, Lines: tw.LinesNone},
		})),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
		tablewriter.WithRowAlignment(tw.AlignLeft),
		tablewriter.WithPadding(tw.Padding{Right: "   "}),
	)
	h := make([]any, len(header))
	for i, s := range header {
		h[i] = s
	}
	t.Header(h...)
	for _, r := range rows {
		if err := t.Append(r); err != nil {
			return err
		}
	}
	return t.Render()
}

// structured prints a plain Go value (not an API object) as JSON or YAML.
func (p printer) structured(v any) error {
	b, err := marshalJSON(v)
	if err != nil {
		return err
	}
	if p.format == formatYAML {
		if b, err = yamlDoc(b); err != nil {
			return err
		}
		_, err = p.w.Write(b)
		return err
	}
	_, err = fmt.Fprintf(p.w, "%s\n", b)
	return err
}

// marshalJSON is json.MarshalIndent without its HTML escaping: what a
// script reads is the value as stored (`<redacted>`, `a&b`), never
// `\u003credacted\u003e`. protojson escapes nothing of that kind, and the
// RawMessages of a list are copied through as they are.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// table prints rows under a header.
func (p printer) table(header []string, rows [][]string) error {
	tp := p
	tp.format = formatTable
	return tp.objects(itemList, header, rows)
}

// warnings prints what the server reported alongside a result (say, a
// corrupt record a list skipped), one `warning:` line each, to stderr in
// every format so that stdout stays machine-readable.
func (p printer) warnings(ws []string) {
	for _, w := range ws {
		fmt.Fprintf(p.errw, "warning: %s\n", w)
	}
}

// failure prints an error as one line. subject, when not empty, names the
// object the error is about, for commands that act on several names; a
// message that names it already (`sandbox "x" not found`) is not given it
// twice.
func (p printer) failure(e *exitError, subject string) {
	switch {
	case e.msg == "":
	case subject != "" && !strings.Contains(e.msg, subject):
		fmt.Fprintf(p.errw, "Error: %s: %s\n", subject, e.msg)
	default:
		fmt.Fprintf(p.errw, "Error: %s\n", e.msg)
	}
}

// hint prints what to do next about an error, if anything.
func (p printer) hint(h string) {
	if h != "" {
		fmt.Fprintf(p.errw, "Hint: %s\n", h)
	}
}

func (p printer) age(ts interface{ AsTime() time.Time }) string {
	if ts == nil {
		return "-"
	}
	d := p.now().Sub(ts.AsTime())
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func kv(m map[string]string) string {
	if len(m) == 0 {
		return "<none>"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

func list(s []string) string {
	if len(s) == 0 {
		return "<none>"
	}
	return strings.Join(s, ",")
}

func (p printer) sandbox(sb *shoalv1.Sandbox) error { return p.sandboxes(bare, sb) }

func (p printer) sandboxList(items []*shoalv1.Sandbox) error { return p.sandboxes(itemList, items...) }

func (p printer) sandboxes(s shape, items ...*shoalv1.Sandbox) error {
	rows := make([][]string, 0, len(items))
	msgs := make([]proto.Message, 0, len(items))
	for _, sb := range items {
		msgs = append(msgs, sb)
		if p.format != formatTable {
			continue // rows are for the table only
		}
		phase := strings.TrimPrefix(sb.GetStatus().GetPhase().String(), "SANDBOX_PHASE_")
		rows = append(rows, []string{sb.GetMeta().GetName(), phase, list(sb.GetSpec().GetProviders()),
			sb.GetSpec().GetImage(), sandboxNode(sb), p.age(sb.GetMeta().GetCreatedAt()), kv(sb.GetMeta().GetLabels())})
	}
	return p.objects(s, []string{"name", "phase", "providers", "image", "node", "age", "labels"}, rows, msgs...)
}

// sandboxNode is the node a sandbox is placed on (spec.node), or the one
// that reported it, for sandboxes made before placement.
func sandboxNode(sb *shoalv1.Sandbox) string {
	if n := sb.GetSpec().GetNode(); n != "" {
		return n
	}
	return sb.GetStatus().GetNode()
}

func (p printer) node(n *shoalv1.Node) error { return p.nodes(bare, n) }

func (p printer) nodeList(items []*shoalv1.Node) error { return p.nodes(itemList, items...) }

func (p printer) nodes(s shape, items ...*shoalv1.Node) error {
	rows := make([][]string, 0, len(items))
	msgs := make([]proto.Message, 0, len(items))
	for _, n := range items {
		st := n.GetStatus()
		status := "NotReady"
		switch {
		case st.GetReady() && st.GetCorrupt() != "":
			status = "Ready,CORRUPT"
		case st.GetReady():
			status = "Ready"
		case st.GetCorrupt() != "":
			status = "CORRUPT"
		}
		if st.GetCorrupt() != "" {
			p.warnings([]string{fmt.Sprintf("node %s: %s; `shoal node remove %s` removes it", n.GetName(), st.GetCorrupt(), n.GetName())})
		}
		if st.GetCordoned() {
			status += ",Cordoned"
		}
		for _, c := range n.GetConditions() {
			// A node's conditions name trouble: shown while "True".
			if c.GetStatus() == "True" {
				status += "," + c.GetType()
			}
		}
		max := "-"
		if n.GetMaxSandboxes() > 0 {
			max = fmt.Sprint(n.GetMaxSandboxes())
		}
		rows = append(rows, []string{n.GetName(), status, fmt.Sprintf("%d/%s", st.GetSandboxes(), max),
			kv(n.GetLabels()), n.GetVersion(), n.GetAddress(), p.age(n.GetStartedAt())})
		msgs = append(msgs, n)
	}
	return p.objects(s, []string{"name", "status", "sandboxes", "labels", "version", "address", "age"}, rows, msgs...)
}

func (p printer) provider(pr *shoalv1.Provider) error { return p.providers(bare, pr) }

func (p printer) providerList(items []*shoalv1.Provider) error {
	return p.providers(itemList, items...)
}

func (p printer) providers(s shape, items ...*shoalv1.Provider) error {
	rows := make([][]string, 0, len(items))
	msgs := make([]proto.Message, 0, len(items))
	for _, pr := range items {
		keys := make([]string, 0, len(pr.Credentials))
		for k := range pr.Credentials {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		state := "Active"
		if pr.GetMeta().GetDeletionTimestamp() != nil {
			state = "Terminating"
		}
		// The type as JSON and YAML print it (the API's enum name, as
		// phases are), so that every format shows the same value.
		rows = append(rows, []string{pr.GetMeta().GetName(), pr.GetType().String(), list(keys), state, p.age(pr.GetMeta().GetCreatedAt())})
		msgs = append(msgs, pr)
	}
	return p.objects(s, []string{"name", "type", "credentials", "state", "age"}, rows, msgs...)
}
