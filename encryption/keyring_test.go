package encryption_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"shoal/encryption"
)

func keyFile(t *testing.T, names ...string) []byte {
	t.Helper()
	var data []byte
	for _, n := range names {
		var err error
		if data, err = encryption.NewKeyFile(data, n); err != nil {
			t.Fatal(err)
		}
	}
	return data
}

func TestSealOpen(t *testing.T) {
	r1, err := encryption.Parse(keyFile(t, "k1"))
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := r1.Seal("ws/p/KEY", "nvapi-secret")
	if err != nil {
		t.Fatal(err)
	}
	if !encryption.Sealed(sealed) || strings.Contains(sealed, "nvapi-secret") {
		t.Fatalf("sealed value %q", sealed)
	}
	if k, _ := encryption.KeyOf(sealed); k != "k1" {
		t.Fatalf("key of the sealed value: %q", k)
	}
	if pt, err := r1.Open("ws/p/KEY", sealed); err != nil || pt != "nvapi-secret" {
		t.Fatalf("open: %q %v", pt, err)
	}
	// Bound to its place.
	if _, err := r1.Open("ws/other/KEY", sealed); err == nil {
		t.Fatal("a value moved to another provider opened")
	}
	// A ring with k1 and a new current k2 reads k1's values and seals with k2.
	r2, err := encryption.Parse(keyFile(t, "k1", "k2"))
	if err != nil {
		t.Fatal(err)
	}
	if r2.Current() != "k2" {
		t.Fatalf("current %q", r2.Current())
	}
	// (r2's k1 is another random key of the same name: it must refuse.)
	if _, err := r2.Open("ws/p/KEY", sealed); err == nil || strings.Contains(err.Error(), "nvapi") {
		t.Fatalf("a different key named k1 opened it, or the error shows it: %v", err)
	}
	r3, err := encryption.Parse(keyFile(t, "k9"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r3.Open("ws/p/KEY", sealed); err == nil || !strings.Contains(err.Error(), `"k1"`) {
		t.Fatalf("a ring without k1: %v", err)
	}
	var none *encryption.KeyRing
	if _, err := none.Open("ws/p/KEY", sealed); err == nil || !strings.Contains(err.Error(), "no --encryption-key-file") {
		t.Fatalf("no ring: %v", err)
	}
}

func TestKeyFileRefusals(t *testing.T) {
	key := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	for _, tc := range []struct{ yaml, want string }{
		{"current: a\nkeys: []\n", "at least one key"},
		{"current: a\nkeys:\n- name: a\n  secret: " + key(16) + "\n", "16 bytes"},
		{"current: a\nkeys:\n- name: a\n  secret: '!!'\n", "not base64"},
		{"current: b\nkeys:\n- name: a\n  secret: " + key(32) + "\n", `"b" is not one of the keys`},
		{"keys:\n- name: a\n  secret: " + key(32) + "\n", "current"},
		{"current: a\nkeys:\n- name: a\n  secret: " + key(32) + "\n- name: a\n  secret: " + key(32) + "\n", "twice"},
		{"current: a b\nkeys:\n- name: a b\n  secret: " + key(32) + "\n", "not a key name"},
		{"current: a\nkey:\n- name: a\n", "not a key file"},
	} {
		if _, err := encryption.Parse([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(path, keyFile(t, "k1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := encryption.Load(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a world-readable key file: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := encryption.Load(path); err != nil {
		t.Fatal(err)
	}
	if _, err := encryption.NewKeyFile(keyFile(t, "k1"), "k1"); err == nil {
		t.Fatal("a second key of the same name was added")
	}
}

// A key file, whatever its bytes: a ring or an error, never a panic; a
// ring that parses seals and opens.
func FuzzParse(f *testing.F) {
	good, _ := encryption.NewKeyFile(nil, "k1")
	f.Add(good)
	f.Add([]byte("current: a\nkeys:\n- name: a\n  secret: AAAA\n"))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := encryption.Parse(data)
		if err != nil {
			return
		}
		s, err := r.Seal("aad", "v")
		if err != nil {
			t.Fatal(err)
		}
		if v, err := r.Open("aad", s); err != nil || v != "v" {
			t.Fatalf("open: %q %v", v, err)
		}
	})
}

// A stored value, whatever its bytes: Open gives the plaintext of a value
// this ring sealed under the same aad, or an error that does not repeat the
// value; it never panics, and nothing else opens (AES-GCM authenticates).
func FuzzOpen(f *testing.F) {
	data, err := encryption.NewKeyFile(nil, "k1")
	if err != nil {
		f.Fatal(err)
	}
	if data, err = encryption.NewKeyFile(data, "k2"); err != nil {
		f.Fatal(err)
	}
	r, err := encryption.Parse(data)
	if err != nil {
		f.Fatal(err)
	}
	sealed := map[[2]string]string{}
	for _, c := range [][2]string{{"ws/p/KEY", "nvapi-secret"}, {"", ""}, {"a", strings.Repeat("x", 300)}} {
		s, err := r.Seal(c[0], c[1])
		if err != nil {
			f.Fatal(err)
		}
		sealed[[2]string{c[0], s}] = c[1]
		f.Add(c[0], s)
		f.Add(c[0], s[:len(s)-1])
		f.Add("other/aad", s)
	}
	f.Add("a", encryption.Prefix+"k1:")
	f.Add("a", encryption.Prefix+"k3:AAAA")
	f.Add("a", encryption.Prefix+"k1")
	f.Add("a", "plain")
	f.Fuzz(func(t *testing.T, aad, v string) {
		pt, err := r.Open(aad, v)
		want, ours := sealed[[2]string{aad, v}]
		switch {
		case err == nil && !ours:
			t.Fatalf("a value this ring never sealed under aad %q opened: %q", aad, pt)
		case err == nil && pt != want:
			t.Fatalf("opened %q, sealed %q", pt, want)
		case err != nil && ours:
			t.Fatalf("a value this ring sealed did not open: %v", err)
		case err != nil && len(v) > 8 && strings.Contains(err.Error(), v):
			t.Fatalf("the error repeats the value: %v", err)
		}
	})
}

// A fingerprint names a key's secret without revealing it: the same secret
// gives the same fingerprint in any ring, another secret of the same name
// another one, and it does not contain the secret.
func TestFingerprint(t *testing.T) {
	a := keyFile(t, "k1")
	ra, err := encryption.Parse(a)
	if err != nil {
		t.Fatal(err)
	}
	ab, err := encryption.NewKeyFile(a, "k2")
	if err != nil {
		t.Fatal(err)
	}
	rab, err := encryption.Parse(ab)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := encryption.Parse(keyFile(t, "k1")) // another secret named k1
	if err != nil {
		t.Fatal(err)
	}
	fa, _ := ra.Fingerprint("k1")
	fab, _ := rab.Fingerprint("k1")
	fb, _ := rb.Fingerprint("k1")
	if fa == "" || fa != fab || fa == fb {
		t.Fatalf("k1 in a: %q, in a+k2: %q, another k1: %q", fa, fab, fb)
	}
	if _, ok := ra.Fingerprint("k2"); ok {
		t.Fatal("a fingerprint of a key the ring lacks")
	}
	if rab.ID() == ra.ID() || !strings.HasPrefix(rab.ID(), "k2/") || ra.ID() != "k1/"+fa {
		t.Fatalf("ids %q %q", ra.ID(), rab.ID())
	}
	for _, line := range strings.Split(string(a), "\n") {
		if secret, ok := strings.CutPrefix(strings.TrimSpace(line), "secret: "); ok {
			raw, _ := base64.StdEncoding.DecodeString(secret)
			if strings.Contains(fa, secret) || strings.Contains(fa, base64.RawURLEncoding.EncodeToString(raw)[:8]) {
				t.Fatal("the fingerprint reveals the secret")
			}
		}
	}
}
