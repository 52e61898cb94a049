package apiserver

import (
	"context"

	"shoal"
	"shoal/store"
)

// ParseSelectorForFuzz exposes the selector parser to the external fuzz
// target; any error it returns must be a typed invalid-argument error.
func ParseSelectorForFuzz(s string) {
	sel, err := parseSelector(s)
	if err != nil && shoal.KindOf(err) != shoal.KindInvalid {
		panic("untyped selector error: " + err.Error())
	}
	sel.matches(map[string]string{"a": "b"})
}

// DecodePageTokenForFuzz decodes tok under a fixed secret for a fixed
// list; it returns the continuation and whether the token was accepted.
// Every error must be a typed invalid-argument error.
func DecodePageTokenForFuzz(tok string) (string, int64, bool) {
	t := &tokenSigner{secret: []byte("fuzz-secret-0123456789abcdef0123")}
	o, err := t.decode(context.Background(), tok, listRef{Kind: "sandboxes", Workspace: "default"}, store.ListOptions{})
	if err != nil && shoal.KindOf(err) != shoal.KindInvalid {
		panic("untyped page token error: " + err.Error())
	}
	return o.After, o.Revision, err == nil
}

// SignPageTokenForFuzz makes a valid token for DecodePageTokenForFuzz.
func SignPageTokenForFuzz(after string, rev int64) string {
	t := &tokenSigner{secret: []byte("fuzz-secret-0123456789abcdef0123")}
	tok, _ := t.encode(context.Background(), listRef{Kind: "sandboxes", Workspace: "default"}, &store.ListOptions{After: after, Revision: rev})
	return tok
}
