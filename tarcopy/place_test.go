package tarcopy_test

import (
	"errors"
	"testing"

	"shoal/tarcopy"
)

// docker cp's table (docs.docker.com, `docker container cp`), row by row.
func TestPlace(t *testing.T) {
	file := tarcopy.Source{Name: "f"}
	dir := tarcopy.Source{Name: "d", Dir: true}
	contents := tarcopy.Source{Name: ".", Dir: true}
	stream := tarcopy.Source{}
	missing := func(p string) tarcopy.Dest { return tarcopy.Dest{Path: p} }
	aFile := func(p string) tarcopy.Dest { return tarcopy.Dest{Path: p, Exists: true} }
	aDir := func(p string) tarcopy.Dest { return tarcopy.Dest{Path: p, Exists: true, Dir: true} }
	for _, tc := range []struct {
		name   string
		src    tarcopy.Source
		dst    tarcopy.Dest
		want   tarcopy.Placement
		landed string
		err    error
	}{
		{"file to a missing path: a file of that name", file, missing("/a/x"), tarcopy.Placement{Dir: "/a", Rename: "x"}, "/a/x", nil},
		{"file to a missing path ending in /", file, missing("/a/x/"), tarcopy.Placement{}, "", tarcopy.ErrNoDir},
		{"file to a missing path ending in /.", file, missing("/a/x/."), tarcopy.Placement{}, "", tarcopy.ErrNoDir},
		{"file onto a file: replaced", file, aFile("/a/x"), tarcopy.Placement{Dir: "/a", Rename: "x"}, "/a/x", nil},
		{"file into a directory: its own name", file, aDir("/a"), tarcopy.Placement{Dir: "/a"}, "/a/f", nil},
		{"file into / ", file, aDir("/"), tarcopy.Placement{Dir: "/"}, "/f", nil},
		{"directory to a missing path: made, with the contents", dir, missing("/a/x"), tarcopy.Placement{Dir: "/a", Rename: "x"}, "/a/x", nil},
		{"directory to a missing path ending in /: made", dir, missing("/a/x/"), tarcopy.Placement{Dir: "/a", Rename: "x"}, "/a/x", nil},
		{"directory onto a file", dir, aFile("/a/x"), tarcopy.Placement{}, "", tarcopy.ErrDirOnFile},
		{"directory into a directory: under its own name", dir, aDir("/a"), tarcopy.Placement{Dir: "/a"}, "/a/d", nil},
		{"DIR/. into a directory: its contents", contents, aDir("/a"), tarcopy.Placement{Dir: "/a"}, "/a", nil},
		{"DIR/. to a missing path: made, with the contents", contents, missing("/a/x"), tarcopy.Placement{Dir: "/a", Rename: "x"}, "/a/x", nil},
		{"DIR/. onto a file", contents, aFile("/a/x"), tarcopy.Placement{}, "", tarcopy.ErrDirOnFile},
		{"a stream into a directory", stream, aDir("/a"), tarcopy.Placement{Dir: "/a"}, "/a", nil},
		{"a stream onto a file", stream, aFile("/a/x"), tarcopy.Placement{}, "", tarcopy.ErrNotDir},
		{"a stream to a missing path", stream, missing("/a/x"), tarcopy.Placement{}, "", tarcopy.ErrNoDir},
		{"relative local paths", file, missing("x"), tarcopy.Placement{Dir: ".", Rename: "x"}, "x", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tarcopy.Place(tc.src, tc.dst)
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Fatalf("Place(%+v, %+v) = %+v, %v; want %+v, %v", tc.src, tc.dst, got, err, tc.want, tc.err)
			}
			if err == nil && got.Landed(tc.src) != tc.landed {
				t.Fatalf("landed at %q, want %q", got.Landed(tc.src), tc.landed)
			}
		})
	}
}
