package tarcopy_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"shoal/tarcopy"
)

func names(t *testing.T, stream []byte) []string {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(stream))
	var out []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		s := h.Name
		if h.Linkname != "" {
			s += "->" + h.Linkname
		}
		if len(b) > 0 {
			s += "=" + string(b)
		}
		out = append(out, s)
	}
}

// Rebase renames the top-level entry (and hard links into it), and
// refuses what lies outside it, climbs out, or the check refuses; a
// stream cut short is an error.
func TestRebase(t *testing.T) {
	in := mkTar(t,
		entry{name: "src/", typ: tar.TypeDir},
		entry{name: "src/a", body: "A"},
		entry{name: "src/h", typ: tar.TypeLink, link: "src/a"},
		entry{name: "src/l", typ: tar.TypeSymlink, link: "/anywhere"},
	)
	var out bytes.Buffer
	st, err := tarcopy.Rebase(&out, bytes.NewReader(in), "src", "dst", tarcopy.RefuseDevices)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(names(t, out.Bytes()), " "), "dst/ dst/a=A dst/h->dst/a dst/l->/anywhere"; got != want || st.Entries != 4 || st.Bytes != 1 {
		t.Fatalf("rebased %q (%+v), want %q", got, st, want)
	}
	// A stream of its own ("." to ""): entries as they are.
	out.Reset()
	if _, err := tarcopy.Rebase(&out, bytes.NewReader(in), ".", "", tarcopy.RefuseDevices); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(t, out.Bytes()), " "); got != "src/ src/a=A src/h->src/a src/l->/anywhere" {
		t.Fatalf("a stream of its own: %q", got)
	}

	for _, tc := range []struct {
		e    entry
		from string
		why  string
	}{
		{entry{name: "other", body: "x"}, "src", "outside"},
		{entry{name: "/etc/passwd", body: "x"}, ".", "absolute"},
		{entry{name: "src/../../x", body: "x"}, "src", "climbs out"},
		{entry{name: "../x", body: "x"}, ".", "climbs out"},
		{entry{name: "src/h", typ: tar.TypeLink, link: "/etc/passwd"}, "src", "hard link"},
		{entry{name: "src/h", typ: tar.TypeLink, link: "other"}, "src", "hard link"},
		{entry{name: "src/sda", typ: tar.TypeBlock}, "src", "device"},
		{entry{name: "src/null", typ: tar.TypeChar}, "src", "device"},
	} {
		_, err := tarcopy.Rebase(io.Discard, bytes.NewReader(mkTar(t, tc.e)), tc.from, "dst", tarcopy.RefuseDevices)
		var ee *tarcopy.EntryError
		if !errors.As(err, &ee) || ee.Name != tc.e.name || !strings.Contains(ee.Why, tc.why) {
			t.Errorf("%q: %v, want an EntryError naming it (%s)", tc.e.name, err, tc.why)
		}
	}
	whole := mkTar(t, entry{name: "src/big", body: strings.Repeat("y", 4096)})
	if _, err := tarcopy.Rebase(io.Discard, bytes.NewReader(whole[:1024]), "src", "", nil); !errors.Is(err, tarcopy.ErrTruncated) {
		t.Errorf("a truncated stream: %v", err)
	}
	if _, err := tarcopy.Rebase(io.Discard, strings.NewReader(strings.Repeat("not a tar ", 100)), ".", "", nil); err == nil {
		t.Errorf("a stream that is not tar: no error")
	}
}
