package tarcopy

import (
	"fmt"
	"path"
	"strings"
)

// EntryError is an entry of a tar stream that was refused.
type EntryError struct {
	Name string // as the stream has it
	Why  string
}

func (e *EntryError) Error() string { return fmt.Sprintf("tar entry %q: %s", e.Name, e.Why) }

// cleanName returns a tar entry's name as a clean relative slash path
// ("." for the top of the stream), or why it is refused: an absolute name,
// or one that climbs out with "..", lands nowhere a copy may write.
func cleanName(name string) (string, string) {
	switch {
	case name == "":
		return "", "an empty name"
	case strings.HasPrefix(name, "/"):
		return "", "an absolute name"
	case strings.ContainsRune(name, 0):
		return "", "a NUL byte in its name"
	}
	c := path.Clean(name)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", "its name climbs out of the destination (..)"
	}
	return c, ""
}

// rename maps an entry's name in a stream whose top-level entry is from
// ("." when the stream holds a directory's contents, or is a tar stream of
// its own) to its name once from is renamed to to ("" keeps from). An entry
// outside from is refused, with why.
func rename(name, from, to string) (string, string) {
	n, why := cleanName(name)
	if why != "" {
		return "", why
	}
	if to == "" {
		to = from
	}
	if from == "." {
		switch {
		case to == ".":
			return n, ""
		case n == ".":
			return to, ""
		}
		return to + "/" + n, ""
	}
	if n == from {
		return to, ""
	}
	if rest, ok := strings.CutPrefix(n, from+"/"); ok {
		return to + "/" + rest, ""
	}
	return "", fmt.Sprintf("it lies outside %q, the copy's top-level entry", from)
}

// ValidSourceName reports whether name may name a copy's top-level entry:
// "." or one path element.
func ValidSourceName(name string) bool {
	return name == "." || (name != "" && name != ".." && !strings.ContainsAny(name, "/\x00"))
}
