package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	shoalv1 "shoal/api/shoal/v1"
)

// The reference -o json|yaml output: each object through protojson, the
// list through json.MarshalIndent without HTML escaping, YAML through
// sigs.k8s.io/yaml's JSONToYAML of the whole document. output.go's
// writers print the same bytes in one pass.
func referenceOutput(t *testing.T, format string, s shape, msgs ...proto.Message) string {
	t.Helper()
	pj := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true}
	var b []byte
	if s == bare {
		mb, err := pj.Marshal(msgs[0])
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := json.Indent(&buf, bytes.TrimSpace(mb), "", "  "); err != nil {
			t.Fatal(err)
		}
		b = buf.Bytes()
	} else {
		raw := make([]json.RawMessage, 0, len(msgs))
		for _, m := range msgs {
			mb, err := pj.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			raw = append(raw, mb)
		}
		var err error
		if b, err = marshalJSON(map[string]any{"items": raw}); err != nil {
			t.Fatal(err)
		}
	}
	if format == formatYAML {
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			t.Fatal(err)
		}
		return string(y)
	}
	return string(b) + "\n"
}

func trickySandboxes() []proto.Message {
	long := strings.Repeat("a word ", 20) + "then: a colon # and a hash"
	strs := []string{"", " lead", "trail ", "yes", "no", "on", "null", "~", "123", "0x1F", "1e3", "1.5", "2026-12-05",
		"2026-12-05T13:08:59Z", "a: b", "- dash", "#hash", "<redacted>", "a&b", "ünïcødé ✓", "tab\there", "line\nbreak\n",
		"two\n\nlines", "'single'", `"double"`, "back\\slash", "\x01ctl", long, strings.Repeat("x", 200), "*star", "&anchor",
		"!tag", "%pct", "@at", "`tick", "{brace}", "[bracket]", "a, b", "?q", "|pipe", ">gt", "=", "<<", ".inf", "-.5", "+1"}
	var out []proto.Message
	for i, s := range strs {
		out = append(out, &shoalv1.Sandbox{
			Meta: &shoalv1.ObjectMeta{Name: fmt.Sprintf("s%d", i), Workspace: "default", Uid: "u",
				Labels:    map[string]string{"k": s, "a10": "x", "a9": "y", "B": "z", "1": "n", s + "key": "v"},
				CreatedAt: timestamppb.New(time.Date(2026, 12, 5, 13, 8, 59, 128101223, time.UTC))},
			Spec:   &shoalv1.SandboxSpec{Image: "shoal/sandbox:dev", Env: map[string]string{"MODE": s}, Providers: []string{s, "p"}},
			Status: &shoalv1.SandboxStatus{Phase: shoalv1.SandboxPhase_READY, Message: "  " + s + " " + long, ExitCode: int32(i - 3)},
		})
	}
	out = append(out, &shoalv1.Node{Name: "n", MaxSandboxes: 7, Status: &shoalv1.NodeStatus{Sandboxes: 3, Ready: true}}, &shoalv1.Sandbox{})
	return out
}

func TestOutputMatchesReference(t *testing.T) {
	msgs := trickySandboxes()
	var many []proto.Message // enough for renderAll's goroutines
	for len(many) < 3*renderChunk {
		many = append(many, msgs...)
	}
	cases := map[string][]proto.Message{"none": nil, "one": msgs[:1], "all": msgs, "many": many}
	for _, format := range []string{formatJSON, formatYAML} {
		for name, ms := range cases {
			var out bytes.Buffer
			p := printer{w: &out, errw: &out, format: format, now: time.Now}
			if err := p.objects(itemList, nil, nil, ms...); err != nil {
				t.Fatal(err)
			}
			if want := referenceOutput(t, format, itemList, ms...); out.String() != want {
				t.Errorf("%s list of %s:\n%s\nwant:\n%s", format, name, out.String(), want)
			}
		}
		for _, m := range msgs {
			var out bytes.Buffer
			p := printer{w: &out, errw: &out, format: format, now: time.Now}
			if err := p.object(m); err != nil {
				t.Fatal(err)
			}
			if want := referenceOutput(t, format, bare, m); out.String() != want {
				t.Errorf("%s object:\n%s\nwant:\n%s", format, out.String(), want)
			}
		}
	}
}

func TestStructuredYAMLMatchesReference(t *testing.T) {
	v := map[string]any{"n": 3, "big": uint64(1) << 63, "neg": -5, "f": 1.5, "e": 1e21, "s": "yes", "nil": nil, "b": true,
		"list": []any{}, "map": map[string]any{}, "nested": []any{map[string]any{"x": "a: b", "y": []string{"1", "two"}}}}
	b, err := marshalJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	want, err := yaml.JSONToYAML(b)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	p := printer{w: &out, errw: &out, format: formatYAML, now: time.Now}
	if err := p.structured(v); err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Errorf("structured yaml:\n%s\nwant:\n%s", out.String(), want)
	}
}

// indentJSON prints what json.Indent prints, for any valid JSON.
func FuzzIndentJSON(f *testing.F) {
	for _, m := range trickySandboxes() {
		b, err := pjCompact.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{`{}`, `[]`, `{ }`, `[ [ ] , { } ]`, `"a\"b\\"`, `{"a":[1,2,{"b":null}],"c":"}{]["}`, " \t\n[1]", `-1.5e3`, `true`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		if !json.Valid(src) {
			return
		}
		var want bytes.Buffer
		if err := json.Indent(&want, src, "    ", "  "); err != nil {
			t.Fatal(err)
		}
		got, err := indentJSON([]byte("x"), src, "    ")
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if string(got) != "x"+want.String() {
			t.Fatalf("%q:\n got %q\nwant %q", src, got[1:], want.String())
		}
	})
}

// Pages rendered as they arrive print what the whole list prints; a page
// that fails to render fails the list.
func TestPageRendererMatchesReference(t *testing.T) {
	var many []proto.Message
	for len(many) < 3*renderChunk {
		many = append(many, trickySandboxes()...)
	}
	for _, format := range []string{formatJSON, formatYAML} {
		for _, ms := range [][]proto.Message{nil, many[:1], many} {
			var out bytes.Buffer
			p := printer{w: &out, errw: &out, format: format, now: time.Now}
			pr := p.pageRenderer()
			for i := 0; i < len(ms); i += 100 {
				pr.add(ms[i:min(i+100, len(ms))])
			}
			items, err := pr.wait()
			if err != nil {
				t.Fatal(err)
			}
			if err := p.renderedList(items); err != nil {
				t.Fatal(err)
			}
			if want := referenceOutput(t, format, itemList, ms...); out.String() != want {
				t.Errorf("%s list of %d in pages:\n%s\nwant:\n%s", format, len(ms), out.String(), want)
			}
		}
		p := printer{w: &bytes.Buffer{}, format: format, now: time.Now}
		pr := p.pageRenderer()
		pr.add(many[:10])
		pr.add([]proto.Message{&shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "bad\xff"}}})
		pr.add(many[10:20])
		if _, err := pr.wait(); err == nil {
			t.Errorf("%s: a page with invalid UTF-8 rendered without error", format)
		}
	}
	if (printer{format: formatTable}).pageRenderer() != nil {
		t.Error("a table got a page renderer")
	}
}
