package apiserver

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"

	"shoal"
	"shoal/store"
)

// Page tokens are opaque to clients and authenticated: a token is the
// continuation (last key, revision) plus what it continues (kind,
// workspace, selector), signed with HMAC-SHA256 under a secret made once
// per cluster and kept in etcd, so every node of the cluster accepts every
// other node's tokens. A token that was forged, altered, or is replayed
// for another list is INVALID_ARGUMENT; the store also refuses a
// continuation key outside the listed prefix, whatever the token says.

// listRef is what a token is bound to.
type listRef struct {
	Kind      string `json:"k"`
	Workspace string `json:"w"`
	Selector  string `json:"s,omitempty"`
}

type pageToken struct {
	listRef
	After    string `json:"a"`
	Revision int64  `json:"r"`
}

// tokenSigner holds the cluster's page-token secret once read.
type tokenSigner struct {
	st     *store.Store
	mu     sync.Mutex
	secret []byte
}

func (t *tokenSigner) key(ctx context.Context) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.secret == nil {
		b, err := t.st.PageTokenSecret(ctx)
		if err != nil {
			return nil, err
		}
		t.secret = b
	}
	return t.secret, nil
}

const tokenDomain = "shoal page token v1\x00"

func mac(key, payload []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(tokenDomain))
	h.Write(payload)
	return h.Sum(nil)
}

// encode returns the token continuing ref at o, or "" for the last page.
func (t *tokenSigner) encode(ctx context.Context, ref listRef, o *store.ListOptions) (string, error) {
	if o == nil {
		return "", nil
	}
	key, err := t.key(ctx)
	if err != nil {
		return "", err
	}
	payload, err := json.Marshal(pageToken{listRef: ref, After: o.After, Revision: o.Revision})
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(mac(key, payload)), nil
}

// decode checks a token's signature and binding and returns the list
// options it continues. An empty token starts a list.
func (t *tokenSigner) decode(ctx context.Context, tok string, ref listRef, o store.ListOptions) (store.ListOptions, error) {
	if tok == "" {
		return o, nil
	}
	bad := shoal.Invalid("page_token", "is not a token from a previous response of this list; start the list again without one")
	p64, m64, ok := strings.Cut(tok, ".")
	if !ok || len(tok) > 4096 {
		return o, bad
	}
	enc := base64.RawURLEncoding
	payload, err1 := enc.DecodeString(p64)
	sig, err2 := enc.DecodeString(m64)
	if err1 != nil || err2 != nil {
		return o, bad
	}
	key, err := t.key(ctx)
	if err != nil {
		return o, err
	}
	if !hmac.Equal(sig, mac(key, payload)) {
		return o, bad
	}
	var pt pageToken
	if err := json.Unmarshal(payload, &pt); err != nil || pt.Revision <= 0 || pt.After == "" {
		return o, bad
	}
	if pt.listRef != ref {
		return o, shoal.Invalid("page_token", "was issued for another list (kind, workspace or selector differ); start the list again without one")
	}
	o.After, o.Revision = pt.After, pt.Revision
	return o, nil
}
