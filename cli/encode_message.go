package cli

import (
	"bytes"
	"encoding/base64"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The direct printer: an API object printed as -o json and -o yaml print
// it, straight from its protobuf encoding. The reference path (encode.go)
// decodes the object, marshals it with protojson, whose reflection is most
// of a long list's time, and reads that JSON again: the indenter for -o
// json, a tree of Go values and go-yaml's emitter for -o yaml. The direct
// printer reads the encoding once and appends the printed bytes; a list's
// items, which arrive encoded (encoded.go), are never decoded at all.
//
// It reads the encoding as proto.Unmarshal does: a message field that
// occurs more than once is the occurrences merged, a scalar is its last
// occurrence, unknown fields and fields of another wire type are skipped,
// and what Unmarshal refuses (a malformed encoding, a string that is not
// UTF-8) it declines. It prints what the reference path prints, or
// declines, and then the object goes the reference way, so that the
// output and the errors of every object are the reference's. It declines
// a message with a field of a shape it does not print (floats, oneofs,
// repeated scalars but strings, maps but map<string, string>, well-known
// types but Timestamp), a timestamp out of protojson's range, and, for
// YAML, a string that go-yaml would print in another way than plain or as
// a short double-quoted string: one with a character outside printable
// ASCII, a line break, an indicator where it makes go-yaml quote it, or a
// space past column 80 where go-yaml folds. encode_test.go compares the
// two paths over random messages of the API's types and fuzzed encodings.

// A msgPlan is how the direct printer prints one message type.
type msgPlan struct {
	direct    bool // every field is of a shape the direct printer prints
	timestamp bool // google.protobuf.Timestamp: an RFC 3339 string
	fields    []fieldPlan
	yamlOrder []int // indices of fields in go-yaml's key order
}

// The shapes of field the direct printer prints.
type fieldShape int

const (
	shapeString fieldShape = iota
	shapeBytes
	shapeBool
	shapeInt32
	shapeUint32
	shapeInt64
	shapeUint64
	shapeEnum
	shapeMessage
	shapeStringList
	shapeMessageList
	shapeStringMap
)

type fieldPlan struct {
	num      protowire.Number
	shape    fieldShape
	presence bool // a scalar printed when it occurs, also as zero (proto3 optional)
	enum     protoreflect.EnumValueDescriptors
	sub      func() *msgPlan // of a message field, or a message list's elements
	name     []byte          // proto name, as UseProtoNames prints it
	jsonKey  string          // `"name": `
}

// wireType is the wire type the field's occurrences have; an occurrence
// of another is an unknown field to proto.Unmarshal.
func (f *fieldPlan) wireType() protowire.Type {
	switch f.shape {
	case shapeBool, shapeInt32, shapeUint32, shapeInt64, shapeUint64, shapeEnum:
		return protowire.VarintType
	}
	return protowire.BytesType
}

var plans sync.Map // protoreflect.MessageDescriptor → *msgPlan

func planOf(md protoreflect.MessageDescriptor) *msgPlan {
	if p, ok := plans.Load(md); ok {
		return p.(*msgPlan)
	}
	p, _ := plans.LoadOrStore(md, newPlan(md))
	return p.(*msgPlan)
}

func newPlan(md protoreflect.MessageDescriptor) *msgPlan {
	p := &msgPlan{direct: true}
	if md.FullName().Parent() == "google.protobuf" {
		// protojson prints the well-known types their own way; of those
		// only Timestamp is printed here (Empty is an ordinary message).
		switch md.Name() {
		case "Timestamp":
			p.timestamp = true
			return p
		case "Empty":
		default:
			p.direct = false
			return p
		}
	}
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		f := fieldPlan{num: fd.Number(), name: []byte(fd.TextName()), presence: fd.HasPresence() && fd.Message() == nil}
		key, _ := appendJSONString(nil, f.name)
		f.jsonKey = string(key) + ": "
		var ok bool
		if f.shape, ok = shapeOf(fd); !ok || fd.ContainingOneof() != nil && !fd.ContainingOneof().IsSynthetic() {
			p.direct = false
		}
		if fd.Enum() != nil {
			f.enum = fd.Enum().Values()
		}
		if m := fd.Message(); m != nil && !fd.IsMap() {
			f.sub = sync.OnceValue(func() *msgPlan { return planOf(m) })
		}
		p.fields = append(p.fields, f)
		p.yamlOrder = append(p.yamlOrder, i)
	}
	slices.SortStableFunc(p.yamlOrder, func(a, b int) int {
		return yamlKeyCompare(p.fields[a].name, p.fields[b].name)
	})
	return p
}

func shapeOf(fd protoreflect.FieldDescriptor) (fieldShape, bool) {
	k := fd.Kind()
	switch {
	case fd.IsMap():
		return shapeStringMap, fd.MapKey().Kind() == protoreflect.StringKind && fd.MapValue().Kind() == protoreflect.StringKind
	case fd.IsList():
		switch k {
		case protoreflect.StringKind:
			return shapeStringList, true
		case protoreflect.MessageKind:
			return shapeMessageList, true
		}
		return 0, false
	}
	switch k {
	case protoreflect.StringKind:
		return shapeString, true
	case protoreflect.BytesKind:
		return shapeBytes, true
	case protoreflect.BoolKind:
		return shapeBool, true
	case protoreflect.Int32Kind:
		return shapeInt32, true
	case protoreflect.Uint32Kind:
		return shapeUint32, true
	case protoreflect.Int64Kind:
		return shapeInt64, true
	case protoreflect.Uint64Kind:
		return shapeUint64, true
	case protoreflect.EnumKind:
		return shapeEnum, fd.Enum().FullName() != "google.protobuf.NullValue" // printed as null
	case protoreflect.MessageKind:
		return shapeMessage, true
	}
	return 0, false // floats (protojson's number format), zigzag and fixed encodings, groups
}

// --- reading the encoding ---

// A wireMsg is a message's encoding: the encodings of its occurrences, to
// be read as one (protobuf merges a message field that occurs twice).
type wireMsg [][]byte

// A fieldIter yields the occurrences of one field of a message.
type fieldIter struct {
	m     wireMsg
	num   protowire.Number
	typ   protowire.Type
	utf8  bool // a string: every occurrence must be UTF-8
	i     int
	b     []byte
	wrong bool // the message does not decode
}

func (m wireMsg) field(f *fieldPlan) fieldIter {
	return fieldIter{m: m, num: f.num, typ: f.wireType(), utf8: f.shape == shapeString || f.shape == shapeStringList}
}

// next returns the next occurrence: its varint, or its bytes; false at
// the end, or when the message does not decode (it.wrong).
func (it *fieldIter) next() (x uint64, v []byte, ok bool) {
	for {
		for len(it.b) == 0 {
			if it.i == len(it.m) {
				return 0, nil, false
			}
			it.b = it.m[it.i]
			it.i++
		}
		num, typ, n := protowire.ConsumeTag(it.b)
		if n < 0 || num > protowire.MaxValidNumber {
			it.wrong = true
			return 0, nil, false
		}
		it.b = it.b[n:]
		if num != it.num || typ != it.typ {
			if n = protowire.ConsumeFieldValue(num, typ, it.b); n < 0 {
				it.wrong = true
				return 0, nil, false
			}
			it.b = it.b[n:]
			continue
		}
		if typ == protowire.VarintType {
			x, n = protowire.ConsumeVarint(it.b)
		} else {
			v, n = protowire.ConsumeBytes(it.b)
		}
		if n < 0 || it.utf8 && !utf8.Valid(v) {
			it.wrong = true
			return 0, nil, false
		}
		it.b = it.b[n:]
		return x, v, true
	}
}

// last is the field's last occurrence (Unmarshal keeps the last of a
// scalar): found false if none, ok false if the message does not decode.
func (m wireMsg) last(f *fieldPlan) (x uint64, v []byte, found, ok bool) {
	it := m.field(f)
	for {
		nx, nv, more := it.next()
		if !more {
			return x, v, found, !it.wrong
		}
		x, v, found = nx, nv, true
	}
}

// scalar is a singular scalar field as Unmarshal leaves it: set false
// when it is not printed (absent, or zero without presence).
func (m wireMsg) scalar(f *fieldPlan) (x uint64, v []byte, set, ok bool) {
	x, v, found, ok := m.last(f)
	if !found || !ok {
		return 0, nil, false, ok
	}
	switch f.shape {
	case shapeString, shapeBytes:
		return x, v, f.presence || len(v) > 0, true
	case shapeInt32, shapeEnum:
		x = uint64(int64(int32(x)))
	case shapeUint32:
		x = uint64(uint32(x))
	}
	return x, v, f.presence || x != 0, true
}

// The fields of a map entry and of a Timestamp, as plans to read them.
var (
	entryKey   = fieldPlan{num: 1, shape: shapeString}
	entryValue = fieldPlan{num: 2, shape: shapeString}
	tsSeconds  = fieldPlan{num: 1, shape: shapeInt64}
	tsNanos    = fieldPlan{num: 2, shape: shapeInt32}
)

// A mapEntry is a map<string, string> entry.
type mapEntry struct{ k, v []byte }

// pushEntries pushes the entries of map field f of m onto the entry
// stack, sorted by key with cmp, one per key (Unmarshal keeps a key's
// last entry), and returns them.
func (s *scratch) pushEntries(m wireMsg, f *fieldPlan, cmp func(a, b []byte) int) ([]mapEntry, bool) {
	lo := len(s.entries)
	it := m.field(f)
	for _, e, ok := it.next(); ok; _, e, ok = it.next() {
		entry := s.push(e)
		// A missing key or value is "".
		_, k, _, kok := entry.last(&entryKey)
		_, v, _, vok := entry.last(&entryValue)
		s.pop(entry)
		if !kok || !vok {
			return nil, false
		}
		s.entries = append(s.entries, mapEntry{k, v})
	}
	if it.wrong {
		return nil, false
	}
	added := s.entries[lo:]
	slices.SortStableFunc(added, func(a, b mapEntry) int { return cmp(a.k, b.k) })
	// Of equal keys, the last (a stable sort keeps their order).
	out := added[:0]
	for i, e := range added {
		if i+1 < len(added) && bytes.Equal(e.k, added[i+1].k) {
			continue
		}
		out = append(out, e)
	}
	s.entries = s.entries[:lo+len(out)]
	return s.entries[lo:], true
}

// timestampText appends protojson's form of a Timestamp: RFC 3339 in UTC
// with 0, 3, 6 or 9 fractional digits; false out of its range.
func timestampText(dst []byte, m wireMsg) ([]byte, bool) {
	secs, _, _, ok1 := m.scalar(&tsSeconds)
	nanos, _, _, ok2 := m.scalar(&tsNanos)
	s, n := int64(secs), int64(nanos)
	if !ok1 || !ok2 || s < -62135596800 || s > 253402300799 || n < 0 || n > 999999999 {
		return dst, false
	}
	dst = time.Unix(s, n).UTC().AppendFormat(dst, "2006-01-02T15:04:05.000000000")
	dst = bytes.TrimSuffix(dst, []byte("000"))
	dst = bytes.TrimSuffix(dst, []byte("000"))
	dst = bytes.TrimSuffix(dst, []byte(".000"))
	return append(dst, 'Z'), true
}

// scratch holds what a printer reuses from object to object.
type scratch struct {
	spans   [][]byte   // occurrences of message fields, a stack
	entries []mapEntry // map entries, a stack
	text    []byte     // a scalar's text
}

// push pushes the encoding of one message onto the span stack; pop pops
// it, or what pushOccurrences pushed.
func (s *scratch) push(enc []byte) wireMsg {
	s.spans = append(s.spans, enc)
	return s.spans[len(s.spans)-1:]
}

func (s *scratch) pop(m wireMsg) { s.spans = s.spans[:len(s.spans)-len(m)] }

// pushOccurrences pushes the occurrences of message field f of m onto the
// span stack and returns them (none: not set).
func (s *scratch) pushOccurrences(m wireMsg, f *fieldPlan) (wireMsg, bool) {
	lo := len(s.spans)
	it := m.field(f)
	for _, v, ok := it.next(); ok; _, v, ok = it.next() {
		s.spans = append(s.spans, v)
	}
	return s.spans[lo:], !it.wrong
}

// --- JSON ---

// appendJSONMessage appends the message encoded as enc, of type plan, as
// jsonItem (prefix "    ") or jsonDoc (prefix "") print it, or returns
// false.
func appendJSONMessage(dst []byte, plan *msgPlan, enc []byte, prefix string, s *scratch) ([]byte, bool) {
	if plan.timestamp {
		return dst, false // never an object of the API
	}
	p := jsonPrinter{b: dst, prefix: prefix, scratch: s}
	m := s.push(enc)
	ok := p.message(plan, m, 0)
	s.pop(m)
	return p.b, ok
}

type jsonPrinter struct {
	b      []byte
	prefix string
	*scratch
}

func (p *jsonPrinter) newline(depth int) {
	p.b = append(p.b, '\n')
	p.b = append(p.b, p.prefix...)
	p.b = appendSpaces(p.b, 2*depth)
}

const spaces = "                                                                "

func appendSpaces(b []byte, n int) []byte {
	for ; n > len(spaces); n -= len(spaces) {
		b = append(b, spaces...)
	}
	return append(b, spaces[:n]...)
}

func (p *jsonPrinter) message(plan *msgPlan, m wireMsg, depth int) bool {
	switch {
	case !plan.direct:
		return false
	case plan.timestamp:
		p.b = append(p.b, '"')
		var ok bool
		p.b, ok = timestampText(p.b, m)
		p.b = append(p.b, '"')
		return ok
	}
	p.b = append(p.b, '{')
	n := 0
	key := func(f *fieldPlan) {
		if n > 0 {
			p.b = append(p.b, ',')
		}
		n++
		p.newline(depth + 1)
		p.b = append(p.b, f.jsonKey...)
	}
	for i := range plan.fields {
		f := &plan.fields[i]
		switch f.shape {
		case shapeMessage:
			occ, ok := p.pushOccurrences(m, f)
			if ok && len(occ) > 0 {
				key(f)
				ok = p.message(f.sub(), occ, depth+1)
			}
			p.pop(occ)
			if !ok {
				return false
			}
		case shapeStringList, shapeMessageList:
			it, k := m.field(f), 0
			for _, v, more := it.next(); more; _, v, more = it.next() {
				if k == 0 {
					key(f)
					p.b = append(p.b, '[')
				} else {
					p.b = append(p.b, ',')
				}
				k++
				p.newline(depth + 2)
				if f.shape == shapeStringList {
					p.b, _ = appendJSONString(p.b, v)
				} else if !p.element(f, v, depth+2) {
					return false
				}
			}
			if it.wrong {
				return false
			}
			if k > 0 {
				p.newline(depth + 1)
				p.b = append(p.b, ']')
			}
		case shapeStringMap:
			lo := len(p.entries)
			es, ok := p.pushEntries(m, f, bytes.Compare)
			if !ok {
				return false
			}
			if len(es) > 0 {
				key(f)
				p.b = append(p.b, '{')
				for i, e := range es {
					if i > 0 {
						p.b = append(p.b, ',')
					}
					p.newline(depth + 2)
					p.b, _ = appendJSONString(p.b, e.k)
					p.b = append(p.b, ": "...)
					p.b, _ = appendJSONString(p.b, e.v)
				}
				p.newline(depth + 1)
				p.b = append(p.b, '}')
			}
			p.entries = p.entries[:lo]
		default:
			x, v, set, ok := m.scalar(f)
			if !ok {
				return false
			}
			if set {
				key(f)
				p.scalar(f, x, v)
			}
		}
	}
	if n > 0 {
		p.newline(depth)
	}
	p.b = append(p.b, '}')
	return true
}

// element appends a message list's element v.
func (p *jsonPrinter) element(f *fieldPlan, v []byte, depth int) bool {
	m := p.push(v)
	ok := p.message(f.sub(), m, depth)
	p.pop(m)
	return ok
}

// scalar appends a singular scalar as protojson writes it.
func (p *jsonPrinter) scalar(f *fieldPlan, x uint64, v []byte) {
	switch f.shape {
	case shapeString:
		p.b, _ = appendJSONString(p.b, v) // UTF-8: checked when read
	case shapeBytes:
		p.b = append(p.b, '"')
		p.b = base64.StdEncoding.AppendEncode(p.b, v)
		p.b = append(p.b, '"')
	case shapeBool:
		p.b = strconv.AppendBool(p.b, x != 0)
	case shapeInt32:
		p.b = strconv.AppendInt(p.b, int64(x), 10)
	case shapeUint32:
		p.b = strconv.AppendUint(p.b, x, 10)
	case shapeInt64:
		p.b = append(strconv.AppendInt(append(p.b, '"'), int64(x), 10), '"')
	case shapeUint64:
		p.b = append(strconv.AppendUint(append(p.b, '"'), x, 10), '"')
	case shapeEnum:
		if ev := f.enum.ByNumber(protoreflect.EnumNumber(int32(x))); ev != nil {
			p.b = append(append(append(p.b, '"'), ev.Name()...), '"')
		} else {
			p.b = strconv.AppendInt(p.b, int64(x), 10)
		}
	}
}

// appendJSONString appends s quoted as protojson quotes it (control
// characters, `"` and `\` escaped, nothing else), or returns false for
// invalid UTF-8, which protojson refuses.
func appendJSONString(dst []byte, s []byte) ([]byte, bool) {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && n == 1 {
				return dst, false
			}
			i += n
			continue
		}
		if c >= ' ' && c != '"' && c != '\\' {
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			const hex = "0123456789abcdef"
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"'), true
}

// --- YAML ---

// appendYAMLItem appends the message encoded as enc, of type plan, as
// yamlItem prints it (an element of a block sequence at column 0), or
// returns false.
func appendYAMLItem(dst []byte, plan *msgPlan, enc []byte, s *scratch) ([]byte, bool) {
	if plan.timestamp {
		return dst, false // never an object of the API
	}
	p := yamlPrinter{b: append(dst, '-'), scratch: s}
	m := s.push(enc)
	ok := p.messageValue(plan, m, 2, true)
	s.pop(m)
	return p.b, ok
}

// appendYAMLDoc appends the message encoded as enc, of type plan, as
// yamlDoc prints it, or returns false.
func appendYAMLDoc(dst []byte, plan *msgPlan, enc []byte, s *scratch) ([]byte, bool) {
	if plan.timestamp {
		return dst, false
	}
	p := yamlPrinter{b: dst, scratch: s}
	start := len(p.b)
	m := s.push(enc)
	ok := p.message(plan, m, 0, false)
	s.pop(m)
	if ok && len(p.b) == start {
		p.b = append(p.b, "{}\n"...)
	}
	return p.b, ok
}

// yamlPrinter prints block YAML as go-yaml v2 does (two-space indent,
// sequences in a mapping not indented, empty collections as {}), a line
// at a time: every value it writes ends its line.
type yamlPrinter struct {
	b []byte
	*scratch
}

// messageValue writes a message as the value after a key's ':' or a
// sequence's '-': " {}" when empty, else a block mapping at column
// indent, on this line (inline, after "- ") or the next ones.
func (p *yamlPrinter) messageValue(plan *msgPlan, m wireMsg, indent int, inline bool) bool {
	if plan.timestamp {
		// Always a YAML timestamp, so go-yaml quotes it.
		p.b = append(p.b, ` "`...)
		var ok bool
		p.b, ok = timestampText(p.b, m)
		p.b = append(p.b, "\"\n"...)
		return ok
	}
	mark := len(p.b)
	if inline {
		p.b = append(p.b, ' ')
	} else {
		p.b = append(p.b, '\n')
	}
	start := len(p.b)
	if !p.message(plan, m, indent, inline) {
		return false
	}
	if len(p.b) == start {
		p.b = append(p.b[:mark], " {}\n"...)
	}
	return true
}

// message writes m's fields as a block mapping with its keys at column
// indent; the first key goes on the current line when inline. It writes
// nothing for a message without fields.
func (p *yamlPrinter) message(plan *msgPlan, m wireMsg, indent int, inline bool) bool {
	if !plan.direct || plan.timestamp {
		return false // a Timestamp is only ever a value (messageValue)
	}
	first := true
	key := func(f *fieldPlan) bool {
		if !first || !inline {
			p.b = appendSpaces(p.b, indent)
		}
		first = false
		return p.key(f.name, indent)
	}
	for _, i := range plan.yamlOrder {
		f := &plan.fields[i]
		switch f.shape {
		case shapeMessage:
			occ, ok := p.pushOccurrences(m, f)
			if ok && len(occ) > 0 {
				ok = key(f) && p.messageValue(f.sub(), occ, indent+2, false)
			}
			p.pop(occ)
			if !ok {
				return false
			}
		case shapeStringList, shapeMessageList:
			// A sequence under a key is not indented.
			it, k := m.field(f), 0
			for _, v, more := it.next(); more; _, v, more = it.next() {
				if k == 0 {
					if !key(f) {
						return false
					}
					p.b = append(p.b, '\n')
				}
				k++
				p.b = appendSpaces(p.b, indent)
				p.b = append(p.b, '-')
				if f.shape == shapeStringList {
					if !p.stringValue(v, indent+2) {
						return false
					}
				} else if !p.element(f, v, indent+2) {
					return false
				}
			}
			if it.wrong {
				return false
			}
		case shapeStringMap:
			lo := len(p.entries)
			es, ok := p.pushEntries(m, f, yamlKeyCompare)
			if !ok {
				return false
			}
			if len(es) > 0 {
				if !key(f) {
					return false
				}
				p.b = append(p.b, '\n')
				for _, e := range es {
					p.b = appendSpaces(p.b, indent+2)
					if !p.key(e.k, indent+2) || !p.stringValue(e.v, -1) {
						return false
					}
				}
			}
			p.entries = p.entries[:lo]
		default:
			x, v, set, ok := m.scalar(f)
			if !ok {
				return false
			}
			if set && (!key(f) || !p.scalar(f, x, v)) {
				return false
			}
		}
	}
	return true
}

// element writes a message list's element v after its '-'.
func (p *yamlPrinter) element(f *fieldPlan, v []byte, indent int) bool {
	m := p.push(v)
	ok := p.messageValue(f.sub(), m, indent, true)
	p.pop(m)
	return ok
}

// key writes a mapping key that starts at column col, and its ':'.
func (p *yamlPrinter) key(k []byte, col int) bool {
	var ok bool
	if p.b, ok = appendYAMLString(p.b, k, col, true); !ok {
		return false
	}
	p.b = append(p.b, ':')
	return true
}

// stringValue writes " s" and ends the line. col is the column s starts
// at, -1 for right after the key just written.
func (p *yamlPrinter) stringValue(s []byte, col int) bool {
	p.b = append(p.b, ' ')
	if col < 0 {
		col = len(p.b) - 1 - bytes.LastIndexByte(p.b, '\n')
	}
	var ok bool
	p.b, ok = appendYAMLString(p.b, s, col, false)
	p.b = append(p.b, '\n')
	return ok
}

// scalar writes a singular scalar's value after its key.
func (p *yamlPrinter) scalar(f *fieldPlan, x uint64, v []byte) bool {
	switch f.shape {
	case shapeString:
		return p.stringValue(v, -1)
	case shapeBytes:
		p.text = base64.StdEncoding.AppendEncode(p.text[:0], v)
		return p.stringValue(p.text, -1)
	case shapeEnum:
		if ev := f.enum.ByNumber(protoreflect.EnumNumber(int32(x))); ev != nil {
			p.text = append(p.text[:0], ev.Name()...)
			return p.stringValue(p.text, -1)
		}
		p.b = strconv.AppendInt(append(p.b, ' '), int64(x), 10) // a number: plain
	case shapeBool:
		p.b = strconv.AppendBool(append(p.b, ' '), x != 0)
	case shapeInt32:
		p.b = strconv.AppendInt(append(p.b, ' '), int64(x), 10)
	case shapeUint32:
		p.b = strconv.AppendUint(append(p.b, ' '), x, 10)
	case shapeInt64, shapeUint64:
		// protojson's string of digits reads back as an int: go-yaml
		// double-quotes it.
		p.b = append(p.b, ` "`...)
		if f.shape == shapeInt64 {
			p.b = strconv.AppendInt(p.b, int64(x), 10)
		} else {
			p.b = strconv.AppendUint(p.b, x, 10)
		}
		p.b = append(p.b, '"')
	}
	p.b = append(p.b, '\n')
	return true
}

// appendYAMLString appends s as go-yaml v2 prints a string scalar whose
// first character goes at column col, as a mapping key or a value; false
// when go-yaml would print it in a way not reproduced here (see the top
// of this file).
func appendYAMLString(dst []byte, s []byte, col int, key bool) ([]byte, bool) {
	lastSpace := -1
	for i, c := range s {
		switch {
		case c < 0x20 || c > 0x7e:
			return dst, false // escapes, line breaks, columns of wide characters
		case c == ' ':
			lastSpace = i
		}
	}
	if key && len(s) > 128 {
		return dst, false // not a simple key: "? key"
	}
	if !yamlPlainIsString(s) {
		// go-yaml double-quotes a string that would read back as another
		// type. Short and without what it escapes, it is s in quotes;
		// with spaces it may fold it.
		if lastSpace >= 0 || bytes.ContainsAny(s, `"\`) {
			return dst, false
		}
		return append(append(append(dst, '"'), s...), '"'), true
	}
	if !yamlPlainAllowed(s) {
		return dst, false // single- or double-quoted
	}
	if !key && col+lastSpace > 80 {
		return dst, false // a space past column 80: folded
	}
	return append(dst, s...), true
}

// yamlPlainAllowed: go-yaml's emitter (yaml_emitter_analyze_scalar)
// allows s, printable ASCII without line breaks, as a plain scalar in a
// block collection.
func yamlPlainAllowed(s []byte) bool {
	if len(s) == 0 {
		return true
	}
	if s[0] == ' ' || s[len(s)-1] == ' ' {
		return false
	}
	if bytes.HasPrefix(s, []byte("---")) || bytes.HasPrefix(s, []byte("...")) {
		return false
	}
	blankAfter := func(i int) bool { return i+1 >= len(s) || s[i+1] == ' ' }
	switch s[0] {
	case '#', ',', '[', ']', '{', '}', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`':
		return false
	case '?', ':', '-':
		if blankAfter(0) {
			return false
		}
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case ':':
			if blankAfter(i) {
				return false
			}
		case '#':
			if s[i-1] == ' ' {
				return false
			}
		}
	}
	return true
}

// yamlPlainIsString: s, printable ASCII, written plain reads back as a
// string (go-yaml v2's resolve and isBase60Float, which its encoder asks
// before writing a string plain). What reads back as a bool, null, number
// or timestamp is double-quoted.
func yamlPlainIsString(s []byte) bool {
	if len(s) == 0 {
		return false // null
	}
	switch c := s[0]; {
	case c == '+' || c == '-' || c >= '0' && c <= '9':
		return !yamlWords[string(s)] && !yamlNumberOrTime(s)
	case c == '.':
		if yamlWords[string(s)] {
			return false
		}
		_, err := strconv.ParseFloat(string(s), 64)
		return err != nil
	case strings.IndexByte("yYnNtTfFoO~", c) >= 0:
		return !yamlWords[string(s)]
	}
	return true
}

// yamlNumberOrTime: s, starting with a sign or a digit, reads back as an
// int, a float or a timestamp (go-yaml v2's resolve), or is a base 60
// float, which go-yaml quotes too. The checks before each parse only
// skip parses that cannot succeed.
func yamlNumberOrTime(s []byte) bool {
	if bytes.IndexByte(s, ':') >= 0 && yamlBase60Float.Match(s) {
		return true
	}
	if isYAMLTimestamp(s) {
		return true
	}
	plain := s
	if bytes.IndexByte(s, '_') >= 0 {
		plain = bytes.ReplaceAll(s, []byte("_"), nil)
	}
	digits := bytes.TrimLeft(plain, "+-")
	// strconv's base 0: a 0x, 0o or 0b prefix, else decimal digits only.
	if hasBasePrefix(digits) || len(digits) > 0 && len(bytes.TrimLeft(digits, "0123456789")) == 0 {
		if _, err := strconv.ParseInt(string(plain), 0, 64); err == nil {
			return true
		}
		if _, err := strconv.ParseUint(string(plain), 0, 64); err == nil {
			return true
		}
	}
	if len(bytes.TrimLeft(plain, "0123456789.eE+-")) == 0 && yamlFloat.Match(plain) {
		if _, err := strconv.ParseFloat(string(plain), 64); err == nil {
			return true
		}
	}
	if rest, ok := bytes.CutPrefix(plain, []byte("0b")); ok {
		if _, err := strconv.ParseInt(string(rest), 2, 64); err == nil {
			return true
		}
		if _, err := strconv.ParseUint(string(rest), 2, 64); err == nil {
			return true
		}
	} else if rest, ok := bytes.CutPrefix(plain, []byte("-0b")); ok {
		if _, err := strconv.ParseInt("-"+string(rest), 2, 64); err == nil {
			return true
		}
	}
	return false
}

func hasBasePrefix(s []byte) bool {
	return len(s) >= 2 && s[0] == '0' && strings.IndexByte("xXoObB", s[1]) >= 0
}

func isYAMLTimestamp(s []byte) bool {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i != 4 || i == len(s) || s[i] != '-' {
		return false
	}
	for _, f := range []string{"2006-1-2T15:4:5.999999999Z07:00", "2006-1-2t15:4:5.999999999Z07:00", "2006-1-2 15:4:5.999999999", "2006-1-2"} {
		if _, err := time.Parse(f, string(s)); err == nil {
			return true
		}
	}
	return false
}

var (
	yamlFloat       = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)
	yamlBase60Float = regexp.MustCompile(`^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`)
	// yamlWords read back as bools, null, special floats or a merge key.
	yamlWords = map[string]bool{}
)

func init() {
	for _, w := range strings.Fields(`y Y yes Yes YES true True TRUE on On ON n N no No NO false False FALSE off Off OFF
		~ null Null NULL .nan .NaN .NAN .inf .Inf .INF +.inf +.Inf +.INF -.inf -.Inf -.INF <<`) {
		yamlWords[w] = true
	}
}

// yamlKeyCompare is go-yaml v2's order of string mapping keys (its
// keyList.Less): runs of digits compare as numbers, letters before other
// characters. The direct printer only prints printable ASCII keys, where
// a byte is a character (it sorts others too, then declines them).
func yamlKeyCompare(a, b []byte) int {
	switch {
	case yamlKeyLess(a, b):
		return -1
	case yamlKeyLess(b, a):
		return 1
	}
	return 0
}

func yamlKeyLess(a, b []byte) bool {
	isLetter := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isDigit := func(c byte) bool { return c >= '0' && c <= '9' }
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] == b[i] {
			continue
		}
		al, bl := isLetter(a[i]), isLetter(b[i])
		if al && bl {
			return a[i] < b[i]
		}
		if al || bl {
			return bl
		}
		var an, bn int64
		if a[i] == '0' || b[i] == '0' {
			for j := i - 1; j >= 0 && isDigit(a[j]); j-- {
				if a[j] != '0' {
					an, bn = 1, 1
					break
				}
			}
		}
		ai, bi := i, i
		for ; ai < len(a) && isDigit(a[ai]); ai++ {
			an = an*10 + int64(a[ai]-'0')
		}
		for ; bi < len(b) && isDigit(b[bi]); bi++ {
			bn = bn*10 + int64(b[bi]-'0')
		}
		if an != bn {
			return an < bn
		}
		if ai != bi {
			return ai < bi
		}
		return a[i] < b[i]
	}
	return len(a) < len(b)
}
