package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
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

// Pages of encoded sandboxes, decoded and rendered as they arrive, print
// what the whole list prints; an item that does not decode fails the list.
func TestPageRendererMatchesReference(t *testing.T) {
	var many []proto.Message
	for len(many) < 3*renderChunk {
		for _, m := range trickySandboxes() {
			if sb, ok := m.(*shoalv1.Sandbox); ok {
				many = append(many, sb)
			}
		}
	}
	encode := func(ms []proto.Message) [][]byte {
		var out [][]byte
		for _, m := range ms {
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
		return out
	}
	newSandbox := func() proto.Message { return &shoalv1.Sandbox{} }
	for _, format := range []string{formatJSON, formatYAML} {
		for _, ms := range [][]proto.Message{nil, many[:1], many} {
			var out bytes.Buffer
			p := printer{w: &out, errw: &out, format: format, now: time.Now}
			pr := p.pageRenderer(newSandbox)
			for i := 0; i < len(ms); i += 100 {
				pr.add(encode(ms[i:min(i+100, len(ms))]))
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
		pr := p.pageRenderer(newSandbox)
		pr.add(encode(many[:10]))
		pr.add([][]byte{[]byte("\x0a\x05bad\xff")})
		pr.add(encode(many[10:20]))
		if _, err := pr.wait(); err == nil {
			t.Errorf("%s: a page with an item that does not decode rendered without error", format)
		}
	}
	if (printer{format: formatTable}).pageRenderer(newSandbox) != nil {
		t.Error("a table got a page renderer")
	}
}

var allForms = map[string]form{"json doc": jsonDocForm, "json item": jsonItemForm, "yaml doc": yamlDocForm, "yaml item": yamlItemForm}

// printDirect prints m in form f from its encoding, as renderAll does.
func printDirect(f form, dst []byte, m proto.Message) ([]byte, bool) {
	enc, err := proto.Marshal(m)
	if err != nil {
		return dst, false
	}
	return f.direct(dst, planOf(m.ProtoReflect().Descriptor()), enc, &scratch{})
}

// The direct printer (encode_message.go) prints what the reference path
// prints, for random messages of every type of the API, encoded as
// proto.Marshal encodes them and in the other ways an encoding may come:
// two messages one after the other (which decode merged), unknown fields
// and zero values written out: where it prints at all. That it does print
// ordinary objects is TestDirectPrintsOrdinary.
func TestDirectMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 22))
	mds := shoalv1.File_shoal_v1_shoal_proto.Messages()
	direct := map[string]int{}
	tries := 0
	for round := range 60 {
		for i := range mds.Len() {
			mt, err := protoregistry.GlobalTypes.FindMessageByName(mds.Get(i).FullName())
			if err != nil {
				t.Fatal(err)
			}
			m, other := mt.New(), mt.New()
			fillRandom(r, m, 0, round%3 == 0)
			fillRandom(r, other, 0, false)
			enc, err := proto.Marshal(m.Interface())
			if err != nil {
				continue // invalid UTF-8: printDirect declines (TestDirectDeclinesWhatDoesNotEncode)
			}
			encOther, _ := proto.Marshal(other.Interface())
			encodings := [][]byte{enc, append(slices.Clone(enc), encOther...), append(slices.Clone(encOther), enc...),
				append(slices.Clone(enc), unknownAndZeros(m.Descriptor())...), append(unknownAndZeros(m.Descriptor()), enc...)}
			for _, b := range encodings {
				decoded := mt.New().Interface()
				if err := proto.Unmarshal(b, decoded); err != nil {
					t.Fatal(err)
				}
				for name, f := range allForms {
					tries++
					got, ok := f.direct([]byte("x"), planOf(m.Descriptor()), b, &scratch{})
					if !ok {
						continue
					}
					direct[name]++
					if want := referenceForm(t, f, decoded); string(got) != "x"+want {
						t.Fatalf("%s of %s (round %d) from %x:\n%s\nwant:\n%s", name, m.Descriptor().FullName(), round, b, got[1:], want)
					}
				}
			}
		}
	}
	t.Logf("printed directly of %d: %v", tries/len(allForms), direct)
}

// unknownAndZeros is an encoding of md with every singular scalar field
// written out as zero, and fields of numbers md does not have.
func unknownAndZeros(md protoreflect.MessageDescriptor) []byte {
	var b []byte
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if fd.IsList() || fd.IsMap() || fd.Message() != nil {
			continue
		}
		switch fd.Kind() {
		case protoreflect.StringKind, protoreflect.BytesKind:
			b = protowire.AppendBytes(protowire.AppendTag(b, fd.Number(), protowire.BytesType), nil)
		case protoreflect.FloatKind, protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
			b = protowire.AppendFixed32(protowire.AppendTag(b, fd.Number(), protowire.Fixed32Type), 0)
		case protoreflect.DoubleKind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
			b = protowire.AppendFixed64(protowire.AppendTag(b, fd.Number(), protowire.Fixed64Type), 0)
		default:
			b = protowire.AppendVarint(protowire.AppendTag(b, fd.Number(), protowire.VarintType), 0)
		}
	}
	b = protowire.AppendVarint(protowire.AppendTag(b, 900, protowire.VarintType), 5)
	b = protowire.AppendBytes(protowire.AppendTag(b, 901, protowire.BytesType), []byte("\xffnot UTF-8, unknown"))
	b = protowire.AppendTag(b, 902, protowire.StartGroupType)
	b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), 1)
	return protowire.AppendTag(b, 902, protowire.EndGroupType)
}

// What proto.Unmarshal refuses, the direct printer declines: the reference
// path then reports the error.
func TestDirectDeclinesWhatDoesNotEncode(t *testing.T) {
	sb := &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "bad\xff"}}
	enc, err := proto.MarshalOptions{}.Marshal(&shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "ok"}})
	if err != nil {
		t.Fatal(err)
	}
	bad := [][]byte{
		enc[:len(enc)-1], // cut short
		protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte("bad\xff"))),
		append(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte("bad\xff"))), enc...), // the bad name overwritten
		protowire.AppendVarint(protowire.AppendTag(nil, protowire.MaxValidNumber+1, protowire.VarintType), 1),
	}
	for name, f := range allForms {
		if _, ok := printDirect(f, nil, sb); ok {
			t.Errorf("%s: printed a name that is not UTF-8", name)
		}
		for _, b := range bad {
			if proto.Unmarshal(b, &shoalv1.Sandbox{}) == nil {
				t.Fatalf("%x decodes", b)
			}
			if _, ok := f.direct(nil, planOf(sb.ProtoReflect().Descriptor()), b, &scratch{}); ok {
				t.Errorf("%s: printed %x, which does not decode", name, b)
			}
		}
	}
}

// Any encoding that decodes to a sandbox: the direct printer prints it as
// the reference path prints the sandbox, or declines.
func FuzzDirectEncoding(f *testing.F) {
	for _, m := range trickySandboxes() {
		if b, err := proto.Marshal(m); err == nil {
			f.Add(b)
			f.Add(append(b, b...))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sb := &shoalv1.Sandbox{}
		if proto.Unmarshal(b, sb) != nil {
			return
		}
		for name, f := range allForms {
			got, ok := f.direct(nil, planOf(sb.ProtoReflect().Descriptor()), b, &scratch{})
			if !ok {
				continue
			}
			if want := referenceForm(t, f, sb); string(got) != want {
				t.Fatalf("%s of %x:\n%s\nwant:\n%s", name, b, got, want)
			}
		}
	})
}

// referenceForm prints m in form f the reference way; "" when that fails.
func referenceForm(t *testing.T, f form, m proto.Message) string {
	t.Helper()
	b, err := pjCompact.Marshal(m)
	if err != nil {
		return ""
	}
	out, err := f.render(b)
	if err != nil {
		t.Fatalf("reference render of %s: %v", b, err)
	}
	return string(out)
}

// Ordinary objects, as a node stores them, take the direct path in every
// form: a list of thousands must not fall back to protojson.
func TestDirectPrintsOrdinary(t *testing.T) {
	ts := timestamppb.New(time.Date(2026, 12, 5, 13, 8, 59, 128101223, time.UTC))
	msgs := []proto.Message{
		&shoalv1.Sandbox{
			Meta: &shoalv1.ObjectMeta{Name: "s000042", Workspace: "default", Uid: "0b8c4c9e-2f6d-4a51-9a43-5d3c1e0f7a21",
				Labels: map[string]string{"team": "ml", "tier": "a10", "app.kubernetes.io/name": "agent", "a9": "1"}, ResourceVersion: 7213, CreatedAt: ts},
			Spec: &shoalv1.SandboxSpec{Image: "shoal/sandbox:dev", Command: []string{"sleep", "infinity"}, Env: map[string]string{"MODE": "bench"},
				Providers: []string{"openai"}, Resources: &shoalv1.Resources{CpuMillis: 500, MemoryBytes: 1 << 30}, Node: "n1"},
			Status: &shoalv1.SandboxStatus{Phase: shoalv1.SandboxPhase_READY, Node: "n1", ContainerId: "3f2a9c", Message: "running",
				Conditions: []*shoalv1.Condition{{Type: "NodeLost", Status: "False", LastTransitionTime: ts}}},
		},
		&shoalv1.Sandbox{},
		&shoalv1.Node{Name: "n1", Address: "10.0.0.7:7443", Version: "v0.3.1-4-g1f592b3", MaxSandboxes: 100, StartedAt: ts,
			Labels: map[string]string{"zone": "b"}, Status: &shoalv1.NodeStatus{Sandboxes: 3, Ready: true}},
		&shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "openai", Workspace: "default", Uid: "u1", CreatedAt: ts},
			Type: shoalv1.ProviderType_OPENAI, Credentials: map[string]string{"OPENAI_API_KEY": "<redacted>"}},
	}
	for name, f := range map[string]form{"json doc": jsonDocForm, "json item": jsonItemForm, "yaml doc": yamlDocForm, "yaml item": yamlItemForm} {
		for _, m := range msgs {
			got, ok := printDirect(f, nil, m)
			if !ok {
				t.Errorf("%s of %v: not printed directly", name, m)
				continue
			}
			if want := referenceForm(t, f, m); string(got) != want {
				t.Errorf("%s:\n%s\nwant:\n%s", name, got, want)
			}
		}
	}
}

// Any string, as a label key and value, a message, a list element and an
// annotation: the direct printer prints it as the reference does, or
// declines.
func FuzzDirectString(f *testing.F) {
	for _, s := range []string{"", "a", "yes", "123", "0x1F", "1e3", "2026-12-05", "1:20", "a: b", "a:b", "a #b", "a#b", "- x", "-x",
		"---", "...x", "<<", ".inf", "+.5", "0b101", "-0b1", "1_000", "a9", "a10", "x y", strings.Repeat("word ", 20), "ü", "tab\t", "\"q\"", `b\s`} {
		f.Add(s, "k")
	}
	f.Fuzz(func(t *testing.T, s, k string) {
		sb := &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: s, Labels: map[string]string{k: s, "a" + k: "x", k + "1": s + s},
			Annotations: map[string]string{s: k}}, Spec: &shoalv1.SandboxSpec{Providers: []string{s, k}},
			Status: &shoalv1.SandboxStatus{Message: k + " " + s}}
		for name, f := range map[string]form{"json doc": jsonDocForm, "json item": jsonItemForm, "yaml doc": yamlDocForm, "yaml item": yamlItemForm} {
			got, ok := printDirect(f, nil, sb)
			if !ok {
				continue
			}
			if want := referenceForm(t, f, sb); string(got) != want {
				t.Fatalf("%s of %q, %q:\n%s\nwant:\n%s", name, s, k, got, want)
			}
		}
	})
}

// fillRandom sets a random selection of m's fields to random values;
// nested messages down to depth 3. Strings come from yamlHard and random
// runes; with tricky, also invalid UTF-8 and timestamps out of range.
func fillRandom(r *rand.Rand, m protoreflect.Message, depth int, tricky bool) {
	fds := m.Descriptor().Fields()
	if m.Descriptor().FullName() == "google.protobuf.Timestamp" {
		secs := r.Int64N(253402300799)
		if tricky && r.IntN(10) == 0 {
			secs = -secs * 10
		}
		nanos := []int64{0, 1e6, 123456000, 128101223}[r.IntN(4)]
		m.Set(fds.ByName("seconds"), protoreflect.ValueOfInt64(secs))
		m.Set(fds.ByName("nanos"), protoreflect.ValueOfInt32(int32(nanos)))
		return
	}
	for i := range fds.Len() {
		fd := fds.Get(i)
		if r.IntN(3) == 0 {
			continue
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range r.IntN(12) {
				mp.Set(protoreflect.ValueOfString(randomString(r, tricky)).MapKey(), randomScalar(r, fd.MapValue(), mp.NewValue, depth, tricky))
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range 1 + r.IntN(4) {
				l.Append(randomScalar(r, fd, l.NewElement, depth, tricky))
			}
		case fd.Kind() == protoreflect.MessageKind:
			if depth < 3 {
				fillRandom(r, m.Mutable(fd).Message(), depth+1, tricky)
			}
		default:
			m.Set(fd, randomScalar(r, fd, nil, depth, tricky))
		}
	}
}

func randomScalar(r *rand.Rand, fd protoreflect.FieldDescriptor, newMsg func() protoreflect.Value, depth int, tricky bool) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 0)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(randomString(r, tricky))
	case protoreflect.BytesKind:
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		return protoreflect.ValueOfBytes(b)
	case protoreflect.EnumKind:
		vs := fd.Enum().Values()
		if r.IntN(8) == 0 {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(100 + r.IntN(5))) // unknown to the descriptor
		}
		return protoreflect.ValueOfEnum(vs.Get(r.IntN(vs.Len())).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(r.Uint32()) >> r.IntN(32))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(r.Uint32() >> r.IntN(32))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(r.Uint64()) >> r.IntN(64))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(r.Uint64() >> r.IntN(64))
	case protoreflect.MessageKind:
		v := newMsg()
		if depth < 3 {
			fillRandom(r, v.Message(), depth+1, tricky)
		}
		return v
	}
	panic(fmt.Sprintf("randomScalar: kind %v", fd.Kind()))
}

// yamlHard are strings that go-yaml prints in every way it has.
var yamlHard = []string{"", " lead", "trail ", "yes", "No", "on", "null", "~", "123", "-5", "+1", "0x1F", "0o17", "0b101", "-0b11",
	"1e3", "1.5", ".5", ".inf", "-.Inf", ".nan", "1_000", "1:20", "190:20:30.15", "2026-12-05", "2026-12-05T13:08:59Z", "2026-1-2 3:4:5",
	"a: b", "a:b", "a:", ":a", ": a", "? q", "?q", "- dash", "-dash", "-", "--- doc", "...", "#hash", "a #b", "a#b", "<redacted>", "a&b",
	"*star", "&anchor", "!tag", "%pct", "@at", "`tick", "{brace}", "[bracket]", "a, b", "|pipe", ">gt", "'single'", `"double"`, "=", "<<",
	"back\\slash", "ünïcødé ✓", "tab\there", "line\nbreak\n", "\x01ctl", "\u2028", "\ufeffbom", "a9", "a10", "A", "b", "_x", "0", "00", "007",
	"0b8c4c9e-2f6d-4a51-9a43-5d3c1e0f7a21", "2026abcd-1111-2222-3333-444455556666", "shoal/sandbox:dev", "app.kubernetes.io/name",
	strings.Repeat("a word ", 14), strings.Repeat("x", 130), strings.Repeat("y", 200) + " z"}

func randomString(r *rand.Rand, tricky bool) string {
	switch n := r.IntN(10); {
	case n < 5:
		return yamlHard[r.IntN(len(yamlHard))]
	case n < 6:
		// Words: plain scalars around column 80, where go-yaml folds.
		var b strings.Builder
		for range r.IntN(25) {
			b.WriteString(yamlHard[r.IntN(len(yamlHard))][:0] + "word" + strconv.Itoa(r.IntN(100)) + " ")
		}
		return strings.TrimSpace(b.String())
	case n < 9:
		const alphabet = "abcXYZ0189 -_.:/#@&*!?,'\"\\{}[]=+<>~"
		b := make([]byte, r.IntN(20))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	if tricky && r.IntN(4) == 0 {
		return "bad\xff"
	}
	return string([]rune{rune(0x20 + r.IntN(0x2100))})
}

// A page of 1,000 encoded sandboxes as list prints them, each path on
// one core: the reference path decodes them first.
func BenchmarkRenderPage(b *testing.B) {
	msgs := make([]proto.Message, 1000)
	for i := range msgs {
		msgs[i] = &shoalv1.Sandbox{
			Meta: &shoalv1.ObjectMeta{Name: fmt.Sprintf("s%06d", i), Workspace: "default", Uid: fmt.Sprintf("%08x-2f6d-4a51-9a43-5d3c1e0f7a21", i*7919),
				Labels: map[string]string{"team": "bench", "tier": "scale"}, ResourceVersion: int64(1000 + i), CreatedAt: timestamppb.Now()},
			Spec:   &shoalv1.SandboxSpec{Image: "shoal/sandbox:dev", Node: "elsewhere", Env: map[string]string{"MODE": "bench"}},
			Status: &shoalv1.SandboxStatus{Phase: shoalv1.SandboxPhase_READY, Node: "elsewhere", Message: "running"},
		}
	}
	encs := make([][]byte, len(msgs))
	for i, m := range msgs {
		var err error
		if encs[i], err = proto.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
	plan := planOf((&shoalv1.Sandbox{}).ProtoReflect().Descriptor())
	for _, format := range []string{formatJSON, formatYAML} {
		_, item := forms(format)
		b.Run(format+"/direct", func(b *testing.B) {
			for b.Loop() {
				var buf []byte
				var s scratch
				for _, enc := range encs {
					var ok bool
					if buf, ok = item.direct(buf[:0], plan, enc, &s); !ok {
						b.Fatal("declined")
					}
				}
			}
		})
		b.Run(format+"/reference", func(b *testing.B) {
			for b.Loop() {
				for _, enc := range encs {
					m := &shoalv1.Sandbox{}
					if err := proto.Unmarshal(enc, m); err != nil {
						b.Fatal(err)
					}
					c, err := pjCompact.Marshal(m)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := item.render(c); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
