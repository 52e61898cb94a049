package apiserver

import "shoal"

// ParseSelectorForFuzz exposes the selector parser to the external fuzz
// target; any error it returns must be a typed invalid-argument error.
func ParseSelectorForFuzz(s string) {
	sel, err := parseSelector(s)
	if err != nil && shoal.KindOf(err) != shoal.KindInvalid {
		panic("untyped selector error: " + err.Error())
	}
	sel.matches(map[string]string{"a": "b"})
}
