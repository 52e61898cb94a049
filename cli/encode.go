package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strconv"

	yamlv2 "go.yaml.in/yaml/v2"
)

// The writers of -o json and -o yaml. They take each object as compact
// JSON (protojson's, or encoding/json's for plain values) and print it in
// one pass, so that a list of thousands costs what its objects cost: the
// list is never marshalled, parsed and marshalled again as a whole.
//
// The output is what json.MarshalIndent (without HTML escaping) and
// sigs.k8s.io/yaml's JSONToYAML of the whole document printed before;
// encode_test.go checks the two side by side.

// The writers write to a bufio.Writer that the caller flushes: a list is
// printed as it is indented, never held whole a second time.

// writeJSON writes the JSON value v indented by two spaces, and a newline.
func writeJSON(w *bufio.Writer, v []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, v, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// writeJSONItems writes {"items": [...]} of the JSON values items.
func writeJSONItems(w *bufio.Writer, items [][]byte) error {
	if len(items) == 0 {
		_, err := w.WriteString("{\n  \"items\": []\n}\n")
		return err
	}
	w.WriteString("{\n  \"items\": [\n")
	var buf bytes.Buffer
	for i, it := range items {
		buf.Reset()
		if i > 0 {
			buf.WriteString(",\n")
		}
		buf.WriteString("    ")
		if err := json.Indent(&buf, it, "    ", "  "); err != nil {
			return err
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return err
		}
	}
	_, err := w.WriteString("\n  ]\n}\n")
	return err
}

// writeYAML writes the JSON value v as a YAML document.
func writeYAML(w *bufio.Writer, v []byte) error {
	tree, err := yamlTree(v)
	if err != nil {
		return err
	}
	b, err := yamlv2.Marshal(tree)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// writeYAMLItems writes items: [...] of the JSON values items as YAML.
// A block sequence under a mapping key is not indented (`items:` then
// `- ` at column 0), so each item is the one-item sequence it would be
// alone, at the same columns, and the YAML encoder never holds more than
// one object (go-yaml v2 keeps every event of a document until its end).
func writeYAMLItems(w *bufio.Writer, items [][]byte) error {
	if len(items) == 0 {
		_, err := w.WriteString("items: []\n")
		return err
	}
	w.WriteString("items:\n")
	one := make([]any, 1)
	for _, it := range items {
		tree, err := yamlTree(it)
		if err != nil {
			return err
		}
		one[0] = tree
		b, err := yamlv2.Marshal(one)
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

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
