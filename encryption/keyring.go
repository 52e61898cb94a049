package encryption

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// Prefix starts every sealed value.
const Prefix = "\x00enc:v1:"

// KeySize is the size of an AES-256 key.
const KeySize = 32

// KeyRing holds the keys of a node; Current seals.
type KeyRing struct {
	current      string
	aeads        map[string]cipher.AEAD
	fingerprints map[string]string
}

type fileFormat struct {
	Current string `json:"current"`
	Keys    []struct {
		Name   string `json:"name"`
		Secret string `json:"secret"`
	} `json:"keys"`
}

// keyNamePattern is what a key's name must match; validKeyName checks it
// by hand (a regexp compiled at init cost every CLI call, which links this
// package, 848 allocations: TestKeyNameIsThePattern holds the two equal).
const keyNamePattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`

func validKeyName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// Load reads a key file. It refuses a file that others may read (its mode
// must be 0600 or stricter), a key that is not 32 bytes, duplicate or
// malformed names, and a current key that is not in the ring; every error
// names the file.
func Load(path string) (*KeyRing, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--encryption-key-file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("--encryption-key-file %s: mode %04o lets others read the keys; chmod 600 it", path, st.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--encryption-key-file: %w", err)
	}
	r, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("--encryption-key-file %s: %w", path, err)
	}
	return r, nil
}

// Parse reads the YAML of a key file.
func Parse(data []byte) (*KeyRing, error) {
	var f fileFormat
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("not a key file: %v", err)
	}
	if len(f.Keys) == 0 {
		return nil, errors.New("keys: at least one key is required")
	}
	r := &KeyRing{current: f.Current, aeads: map[string]cipher.AEAD{}, fingerprints: map[string]string{}}
	for i, k := range f.Keys {
		if !validKeyName(k.Name) {
			return nil, fmt.Errorf("keys[%d].name: %q is not a key name (letters, digits, '.', '_', '-'; at most 63)", i, k.Name)
		}
		if _, dup := r.aeads[k.Name]; dup {
			return nil, fmt.Errorf("keys[%d].name: %q is given twice", i, k.Name)
		}
		secret, err := base64.StdEncoding.DecodeString(strings.TrimSpace(k.Secret))
		if err != nil {
			return nil, fmt.Errorf("keys[%d].secret (key %q): not base64: %v", i, k.Name, err)
		}
		if len(secret) != KeySize {
			return nil, fmt.Errorf("keys[%d].secret (key %q): %d bytes; an AES-256 key is %d (`shoal admin new-encryption-key` makes one)", i, k.Name, len(secret), KeySize)
		}
		block, err := aes.NewCipher(secret)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		r.aeads[k.Name] = aead
		r.fingerprints[k.Name] = fingerprint(secret)
	}
	if f.Current == "" {
		return nil, errors.New("current: name the key that encrypts new values")
	}
	if _, ok := r.aeads[f.Current]; !ok {
		return nil, fmt.Errorf("current: %q is not one of the keys", f.Current)
	}
	return r, nil
}

// Current is the name of the key that seals.
func (r *KeyRing) Current() string { return r.current }

// Fingerprint identifies a key of the ring without revealing it, so that
// nodes can tell whether they hold the same key under a name: the first 12
// bytes of HMAC-SHA256 keyed with the secret over a fixed label, base64.
func (r *KeyRing) Fingerprint(name string) (string, bool) {
	fp, ok := r.fingerprints[name]
	return fp, ok
}

// ID is "name/fingerprint" of the current key.
func (r *KeyRing) ID() string { return r.current + "/" + r.fingerprints[r.current] }

func fingerprint(secret []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("shoal.dev/encryption-key-fingerprint/v1"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:12])
}

// Sealed reports whether v is a sealed value.
func Sealed(v string) bool { return strings.HasPrefix(v, Prefix) }

// KeyOf is the name of the key a sealed value was sealed with.
func KeyOf(v string) (string, bool) {
	if !Sealed(v) {
		return "", false
	}
	name, _, ok := strings.Cut(strings.TrimPrefix(v, Prefix), ":")
	return name, ok
}

// Seal encrypts plaintext under the current key, bound to aad.
func (r *KeyRing) Seal(aad, plaintext string) (string, error) {
	aead := r.aeads[r.current]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := aead.Seal(nonce, nonce, []byte(plaintext), []byte(aad))
	return Prefix + r.current + ":" + base64.RawStdEncoding.EncodeToString(out), nil
}

// ErrNoKey: the value names a key the ring lacks (or there is no ring).
var ErrNoKey = errors.New("the key it was encrypted with is not in this node's key ring")

// Open decrypts a sealed value bound to aad. The error never contains the
// value, sealed or not.
func (r *KeyRing) Open(aad, sealed string) (string, error) {
	name, ok := KeyOf(sealed)
	if !ok {
		return "", errors.New("not a sealed value")
	}
	if r == nil {
		return "", fmt.Errorf("encrypted with key %q, and this node has no --encryption-key-file", name)
	}
	aead, ok := r.aeads[name]
	if !ok {
		return "", fmt.Errorf("encrypted with key %q: %w", name, ErrNoKey)
	}
	raw, err := base64.RawStdEncoding.DecodeString(strings.TrimPrefix(sealed, Prefix+name+":"))
	if err != nil || len(raw) < aead.NonceSize()+aead.Overhead() {
		return "", fmt.Errorf("encrypted with key %q: the ciphertext is damaged", name)
	}
	pt, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], []byte(aad))
	if err != nil {
		return "", fmt.Errorf("encrypted with key %q: it does not open with that key (a different key of the same name, or a value moved from another record)", name)
	}
	return string(pt), nil
}

// NewKeyFile makes the YAML of a key file with one new random key, or adds
// a new key to an existing file's content and makes it current.
func NewKeyFile(existing []byte, name string) ([]byte, error) {
	if !validKeyName(name) {
		return nil, fmt.Errorf("--name: %q is not a key name (letters, digits, '.', '_', '-'; at most 63)", name)
	}
	var f fileFormat
	if len(existing) > 0 {
		if _, err := Parse(existing); err != nil {
			return nil, err
		}
		if err := yaml.Unmarshal(existing, &f); err != nil {
			return nil, err
		}
	}
	for _, k := range f.Keys {
		if k.Name == name {
			return nil, fmt.Errorf("--name: the file has a key %q already", name)
		}
	}
	secret := make([]byte, KeySize)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	f.Keys = append(f.Keys, struct {
		Name   string `json:"name"`
		Secret string `json:"secret"`
	}{name, base64.StdEncoding.EncodeToString(secret)})
	f.Current = name
	return yaml.Marshal(f)
}
