package cli

import (
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
	"sigs.k8s.io/yaml"

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

type printer struct {
	w      io.Writer
	format string
	now    func() time.Time
}

var pj = protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true}

// objects prints one object or a list: as a table of rows, or as JSON/YAML.
func (p printer) objects(header []string, rows [][]string, msgs ...proto.Message) error {
	switch p.format {
	case formatJSON, formatYAML:
		var raw []json.RawMessage
		for _, m := range msgs {
			b, err := pj.Marshal(m)
			if err != nil {
				return err
			}
			raw = append(raw, b)
		}
		var b []byte
		var err error
		if len(raw) == 1 {
			b = raw[0]
		} else {
			if raw == nil {
				raw = []json.RawMessage{}
			}
			b, err = json.MarshalIndent(map[string]any{"items": raw}, "", "  ")
			if err != nil {
				return err
			}
		}
		if p.format == formatYAML {
			if b, err = yaml.JSONToYAML(b); err != nil {
				return err
			}
			_, err = p.w.Write(b)
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", b)
		return err
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

func (p printer) sandboxes(items ...*shoalv1.Sandbox) error {
	rows := make([][]string, 0, len(items))
	msgs := make([]proto.Message, 0, len(items))
	for _, sb := range items {
		phase := strings.TrimPrefix(sb.GetStatus().GetPhase().String(), "SANDBOX_PHASE_")
		rows = append(rows, []string{sb.GetMeta().GetName(), phase, list(sb.GetSpec().GetProviders()),
			sb.GetSpec().GetImage(), sb.GetStatus().GetNode(), p.age(sb.GetMeta().GetCreatedAt()), kv(sb.GetMeta().GetLabels())})
		msgs = append(msgs, sb)
	}
	return p.objects([]string{"name", "phase", "providers", "image", "node", "age", "labels"}, rows, msgs...)
}

func (p printer) providers(items ...*shoalv1.Provider) error {
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
		rows = append(rows, []string{pr.GetMeta().GetName(), strings.ToLower(pr.Type.String()), list(keys), state, p.age(pr.GetMeta().GetCreatedAt())})
		msgs = append(msgs, pr)
	}
	return p.objects([]string{"name", "type", "credentials", "state", "age"}, rows, msgs...)
}
