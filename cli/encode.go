package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"

	yamlv2 "go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/proto"
)

// The writers of -o json and -o yaml. Each object is printed on its own
// (renderAll, on every core), and a list is its objects' printed forms
// joined, so that a list of thousands costs what its objects cost: it is
// never marshalled, parsed and marshalled again as a whole.
//
// An API object is printed straight from its protobuf encoding
// (encode_message.go), or, where that declines, the reference way:
// protojson's compact JSON (encoding/json's, for plain values), indented
// by indentJSON, or made a tree of Go values for go-yaml. The output is
// what json.MarshalIndent (without HTML escaping) and sigs.k8s.io/yaml's
// JSONToYAML of the whole document printed before; encode_test.go checks
// them side by side.

// A renderFunc turns one object's compact JSON into its printed form.
type renderFunc func(compact []byte) ([]byte, error)

// A form is how one object is printed: alone (get) or as an element of a
// list, in JSON or YAML.
type form struct {
	// direct appends the object printed from its encoding, or returns
	// false (encode_message.go).
	direct func(dst []byte, plan *msgPlan, enc []byte, s *scratch) ([]byte, bool)
	// render prints it from its protojson, the reference way.
	render renderFunc
}

var (
	jsonDocForm = form{func(dst []byte, plan *msgPlan, enc []byte, s *scratch) ([]byte, bool) {
		b, ok := appendJSONMessage(dst, plan, enc, "", s)
		return append(b, '\n'), ok
	}, jsonDoc}
	jsonItemForm = form{func(dst []byte, plan *msgPlan, enc []byte, s *scratch) ([]byte, bool) {
		return appendJSONMessage(append(dst, "    "...), plan, enc, "    ", s)
	}, jsonItem}
	yamlDocForm  = form{appendYAMLDoc, yamlDoc}
	yamlItemForm = form{appendYAMLItem, yamlItem}
)

// forms are format's forms of an object alone and in a list.
func forms(format string) (doc, item form) {
	if format == formatYAML {
		return yamlDocForm, yamlItemForm
	}
	return jsonDocForm, jsonItemForm
}

// jsonDoc prints a JSON value alone: indented by two spaces, a newline.
func jsonDoc(v []byte) ([]byte, error) {
	b, err := indentJSON(nil, v, "")
	return append(b, '\n'), err
}

// jsonItem prints a JSON value as an element of {"items": [...]}.
func jsonItem(v []byte) ([]byte, error) {
	return indentJSON([]byte("    "), v, "    ")
}

// yamlDoc prints a JSON value as a YAML document.
func yamlDoc(v []byte) ([]byte, error) {
	tree, err := yamlTree(v)
	if err != nil {
		return nil, err
	}
	return yamlv2.Marshal(tree)
}

// yamlItem prints a JSON value as an element of `items:`. A block
// sequence under a mapping key is not indented (`items:` then `- ` at
// column 0), so an element is the one-element sequence it would be alone,
// at the same columns (which matter: go-yaml folds long strings at 80),
// and the YAML encoder never holds more than one object (go-yaml v2 keeps
// every event of a document until its end).
func yamlItem(v []byte) ([]byte, error) {
	tree, err := yamlTree(v)
	if err != nil {
		return nil, err
	}
	return yamlv2.Marshal([]any{tree})
}

// writeItems writes the rendered elements of a list in format.
func writeItems(w *bufio.Writer, format string, items [][]byte) error {
	switch {
	case format == formatYAML && len(items) == 0:
		w.WriteString("items: []\n")
	case format == formatYAML:
		w.WriteString("items:\n")
		for _, it := range items {
			w.Write(it)
		}
	case len(items) == 0:
		w.WriteString("{\n  \"items\": []\n}\n")
	default:
		w.WriteString("{\n  \"items\": [\n")
		for i, it := range items {
			if i > 0 {
				w.WriteString(",\n")
			}
			w.Write(it)
		}
		w.WriteString("\n  ]\n}\n")
	}
	return w.Flush()
}

// A printable is an object to print: m, or, when encoded, enc, its
// encoding, with m an empty message of its type to decode it into if the
// reference way prints it.
type printable struct {
	m       proto.Message
	enc     []byte
	encoded bool
}

// renderAll prints n objects in form f, on up to GOMAXPROCS goroutines,
// and returns them in order, or the first error of the first object that
// failed. obj(i) is the i-th object. Each goroutine prints its run of
// objects into one buffer, which the returned slices share.
func renderAll(n int, obj func(i int) printable, f form) ([][]byte, error) {
	out := make([][]byte, n)
	// run prints objects lo to hi into out[lo:hi].
	run := func(lo, hi int) error {
		var buf, enc []byte
		var s scratch
		ends := make([]int, 0, hi-lo)
		for i := lo; i < hi; i++ {
			o := obj(i)
			start := len(buf)
			ok := o.encoded
			if ok {
				enc = o.enc
			} else {
				// An object in hand is printed from its encoding too.
				var err error
				enc, err = proto.MarshalOptions{}.MarshalAppend(enc[:0], o.m)
				ok = err == nil
			}
			if ok {
				buf, ok = f.direct(buf, planOf(o.m.ProtoReflect().Descriptor()), enc, &s)
			}
			if !ok {
				b, err := renderReference(o, f.render)
				if err != nil {
					return err
				}
				buf = append(buf[:start], b...)
			}
			ends = append(ends, len(buf))
			if len(ends) == 1 {
				// Objects of a list are much alike: room for the rest
				// at a quarter more than the first, not grown by copying.
				buf = slices.Grow(buf, len(buf)*(hi-lo-1)*5/4)
			}
		}
		start := 0
		for i, end := range ends {
			out[lo+i] = buf[start:end:end]
			start = end
		}
		return nil
	}
	workers := min(runtime.GOMAXPROCS(0), (n+renderChunk-1)/renderChunk)
	if workers <= 1 {
		if err := run(0, n); err != nil {
			return nil, err
		}
		return out, nil
	}
	errs := make([]error, workers)
	per := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { errs[w] = run(w*per, min(n, (w+1)*per)) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// renderReference prints o the reference way: decoded, marshalled by
// protojson and rendered.
func renderReference(o printable, render renderFunc) ([]byte, error) {
	if o.encoded {
		if err := proto.Unmarshal(o.enc, o.m); err != nil {
			return nil, fmt.Errorf("internal error: an item of the list does not decode: %w", err)
		}
	}
	b, err := pjCompact.Marshal(o.m)
	if err != nil {
		return nil, err
	}
	return render(b)
}

// renderChunk is the fewest objects worth a goroutine of their own.
const renderChunk = 256

// yamlTree decodes a JSON value into the Go values the YAML encoder
// prints: numbers typed as go-yaml types them when it reads JSON as YAML
// (int, int64, uint64, else float64), so that 3 stays 3, never 3e+00.
func yamlTree(v []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	var tree any
	if err := d.Decode(&tree); err != nil {
		return nil, err
	}
	return yamlNumbers(tree), nil
}

func yamlNumbers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = yamlNumbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = yamlNumbers(e)
		}
	case json.Number:
		s := string(v)
		if i, err := strconv.ParseInt(s, 0, 64); err == nil {
			if i == int64(int(i)) {
				return int(i)
			}
			return i
		}
		if u, err := strconv.ParseUint(s, 0, 64); err == nil {
			return u
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return f
		}
		return s
	}
	return v
}

// indentJSON appends the JSON value src to dst as json.Indent(dst, src,
// prefix, "  ") does, in one pass that looks at a string only for its
// closing quote (json.Indent steps a scanner state machine through every
// byte). src must be one JSON value as an encoder wrote it; what is not
// balanced is an error.
func indentJSON(dst, src []byte, prefix string) ([]byte, error) {
	// json.Indent keeps the white space after the value as it is.
	body := bytes.TrimRight(src, " \t\r\n")
	trail := src[len(body):]
	src = body
	depth := 0
	needIndent := false // after { or [: indent before what follows, unless it closes
	newline := func() {
		dst = append(dst, '\n')
		dst = append(dst, prefix...)
		for range depth {
			dst = append(dst, "  "...)
		}
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '}', ']':
			if needIndent {
				needIndent = false // {} and [] stay as they are
			} else {
				if depth == 0 {
					return nil, errBadJSON
				}
				depth--
				newline()
			}
			dst = append(dst, c)
			continue
		}
		if needIndent {
			needIndent = false
			depth++
			newline()
		}
		switch c {
		case '{', '[':
			needIndent = true
			dst = append(dst, c)
		case ',':
			dst = append(dst, c)
			newline()
		case ':':
			dst = append(dst, ':', ' ')
		case '"':
			j := i + 1
			for ; j < len(src) && src[j] != '"'; j++ {
				if src[j] == '\\' {
					j++
				}
			}
			if j >= len(src) {
				return nil, errBadJSON
			}
			dst = append(dst, src[i:j+1]...)
			i = j
		default:
			dst = append(dst, c)
		}
	}
	if depth != 0 || needIndent {
		return nil, errBadJSON
	}
	return append(dst, trail...), nil
}

var errBadJSON = errors.New("internal error: unbalanced JSON from the encoder")

// pageRenderer renders a list's pages for -o json|yaml as they arrive, so
// that the render of one page (its decoding too) overlaps the fetch of the
// next. Its owner adds every page it got, then calls wait (always, also
// after an error), which waits for the renders and returns them in order;
// nothing is printed until then, so a failed list prints nothing on
// stdout.
type pageRenderer struct {
	pages  chan [][]byte
	newObj func() proto.Message
	done   chan struct{}
	items  [][]byte
	err    error
}

// pageRenderer is nil for the table, which is printed from the objects.
// newObj makes an empty object of the list's kind, to decode an item into.
func (p printer) pageRenderer(newObj func() proto.Message) *pageRenderer {
	if p.format != formatJSON && p.format != formatYAML {
		return nil
	}
	_, item := forms(p.format)
	r := &pageRenderer{pages: make(chan [][]byte, 8), newObj: newObj, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for page := range r.pages {
			if r.err != nil {
				continue // drain
			}
			var items [][]byte
			if items, r.err = renderAll(len(page), r.decode(page), item); r.err == nil {
				r.items = append(r.items, items...)
			}
		}
	}()
	return r
}

// decode is the objects of page: encoded, of the list's kind.
func (r *pageRenderer) decode(page [][]byte) func(i int) printable {
	return func(i int) printable { return printable{m: r.newObj(), enc: page[i], encoded: true} }
}

// add adds a page of encoded items (invokeEncoded).
func (r *pageRenderer) add(items [][]byte) { r.pages <- items }

func (r *pageRenderer) wait() ([][]byte, error) {
	close(r.pages)
	<-r.done
	return r.items, r.err
}

// renderedList writes the list a pageRenderer rendered.
func (p printer) renderedList(items [][]byte) error {
	return writeItems(bufio.NewWriterSize(p.w, 64<<10), p.format, items)
}
