package tarcopy_test

import (
	"archive/tar"
	"bytes"
	"testing"

	"shoal/tarcopy"
)

// FuzzExtract: whatever a sandbox sends, nothing is written outside the
// destination, and Extract returns (no panic).
func FuzzExtract(f *testing.F) {
	for _, es := range [][]entry{
		{{name: "x/../../etc/passwd", body: "p"}},
		{{name: "/etc/passwd", body: "p"}},
		{{name: "x/e", typ: tar.TypeSymlink, link: "/etc"}, {name: "x/e/passwd", body: "p"}},
		{{name: "x/s", typ: tar.TypeSymlink, link: "../sibling"}, {name: "x/s/p", body: "p"}},
		{{name: "x/h", typ: tar.TypeLink, link: "../etc/passwd"}},
		{{name: "x/", typ: tar.TypeDir}, {name: "x/a", body: "a"}, {name: "x/b", typ: tar.TypeLink, link: "x/a"}},
	} {
		f.Add(mkTar(f, es...), "")
		f.Add(mkTar(f, es...), "dst")
	}
	f.Fuzz(func(t *testing.T, stream []byte, to string) {
		if to != "" && to != "dst" {
			to = "dst"
		}
		w := newWorld(t)
		dir := w.dst
		if to != "" {
			dir = w.top
		}
		_, _ = tarcopy.Extract(bytes.NewReader(stream), dir, "x", to, tarcopy.ExtractOptions{})
		if changed := w.outside(t); len(changed) > 0 {
			t.Fatalf("written outside the destination: %q", changed)
		}
	})
}
