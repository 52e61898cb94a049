package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"runtime"
	"strconv"
	"sync"

	yamlv2 "go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/proto"
)

// The writers of -o json and -o yaml. They take each object as compact
// JSON (protojson's, or encoding/json's for plain values) and print it in
// one pass, so that a list of thousands costs what its objects cost: the
// list is never marshalled, parsed and marshalled again as a whole, and
// its objects are rendered on every core (renderAll).
//
// The output is what json.MarshalIndent (without HTML escaping) and
// sigs.k8s.io/yaml's JSONToYAML of the whole document printed before;
// encode_test.go checks the two side by side.

// A renderFunc turns one object's compact JSON into its printed form.
type renderFunc func(compact []byte) ([]byte, error)

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

// renderAll marshals every message with protojson and renders it, on up
// to GOMAXPROCS goroutines (a list of thousands is CPU-bound in protojson),
// and returns them in order, or the first error of the first object that
// failed.
func renderAll(msgs []proto.Message, render renderFunc) ([][]byte, error) {
	out := make([][]byte, len(msgs))
	one := func(i int) error {
		b, err := pjCompact.Marshal(msgs[i])
		if err != nil {
			return err
		}
		out[i], err = render(b)
		return err
	}
	workers := min(runtime.GOMAXPROCS(0), (len(msgs)+renderChunk-1)/renderChunk)
	if workers <= 1 {
		for i := range msgs {
			if err := one(i); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	errs := make([]error, workers)
	per := (len(msgs) + workers - 1) / workers
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * per; i < min(len(msgs), (w+1)*per); i++ {
				if errs[w] = one(i); errs[w] != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
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
// that the render of one page overlaps the fetch of the next. Its owner
// adds every page it got, then calls wait (always, also after an error),
// which waits for the renders and returns them in order; nothing is
// printed until then, so a failed list prints nothing on stdout.
type pageRenderer struct {
	pages chan []proto.Message
	done  chan struct{}
	items [][]byte
	err   error
}

// pageRenderer is nil for the table, which is printed from the objects.
func (p printer) pageRenderer() *pageRenderer {
	render := jsonItem
	switch p.format {
	case formatJSON:
	case formatYAML:
		render = yamlItem
	default:
		return nil
	}
	r := &pageRenderer{pages: make(chan []proto.Message, 8), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for msgs := range r.pages {
			if r.err != nil {
				continue // drain
			}
			var items [][]byte
			if items, r.err = renderAll(msgs, render); r.err == nil {
				r.items = append(r.items, items...)
			}
		}
	}()
	return r
}

func (r *pageRenderer) add(msgs []proto.Message) { r.pages <- msgs }

func (r *pageRenderer) wait() ([][]byte, error) {
	close(r.pages)
	<-r.done
	return r.items, r.err
}

// renderedList writes the list a pageRenderer rendered.
func (p printer) renderedList(items [][]byte) error {
	return writeItems(bufio.NewWriterSize(p.w, 64<<10), p.format, items)
}
