package store_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"sigs.k8s.io/yaml"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/encryption"
	"shoal/internal/testenv"
	"shoal/store"
)

// ring parses a key file made of data plus a new key of each name.
func ring(t *testing.T, data []byte, names ...string) ([]byte, *encryption.KeyRing) {
	t.Helper()
	for _, n := range names {
		var err error
		if data, err = encryption.NewKeyFile(data, n); err != nil {
			t.Fatal(err)
		}
	}
	r, err := encryption.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return data, r
}

// rawHas reports whether any raw etcd value holds s.
func rawHas(t *testing.T, c *clientv3.Client, s string) bool {
	t.Helper()
	resp, err := c.Get(ctxT(t), "", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Value), s) {
			return true
		}
	}
	return false
}

// With a key ring, credential values are sealed in etcd and the rest of
// the record is readable; the store returns them sealed and opens them
// only on request. A store without the key names the key per provider and
// still lists it. Rotation moves every value to the current key, seals
// plaintext written before encryption, and is a no-op the second time.
func TestCredentialsEncryptedAtRest(t *testing.T) {
	t.Parallel()
	c, _ := testenv.Etcd(t)
	ctx := ctxT(t)
	const secret = "nvapi-at-rest-0123456789"
	file1, k1 := ring(t, nil, "k1")
	s := store.New(c, store.Options{Keys: k1})
	p := &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "nv", Labels: map[string]string{"team": "a"}}, Type: shoalv1.ProviderType_NVIDIA,
		Credentials: map[string]string{"NVIDIA_API_KEY": secret}, Config: map[string]string{"region": "eu-readable"}}
	if _, err := s.CreateProvider(ctx, p); err != nil {
		t.Fatal(err)
	}
	if rawHas(t, c, secret) {
		t.Fatal("the credential is in etcd in plaintext")
	}
	if !rawHas(t, c, "eu-readable") || !rawHas(t, c, "NVIDIA_API_KEY") {
		t.Fatal("the record's other fields are not readable")
	}
	got, err := s.GetProvider(ctx, "default", "nv")
	if err != nil {
		t.Fatal(err)
	}
	if v := got.Credentials["NVIDIA_API_KEY"]; !encryption.Sealed(v) {
		t.Fatalf("GetProvider returned the credential opened: %q", v)
	}
	creds, err := s.OpenCredentials(got)
	if err != nil || creds["NVIDIA_API_KEY"] != secret {
		t.Fatalf("open: %v %v", creds, err)
	}
	// A label change leaves the sealed bytes as they are.
	before := got.Credentials["NVIDIA_API_KEY"]
	up, err := s.UpdateProvider(ctx, "default", "nv", store.Preconditions{}, func(p *shoalv1.Provider) error { p.Meta.Labels["team"] = "b"; return nil })
	if err != nil || up.Credentials["NVIDIA_API_KEY"] != before {
		t.Fatalf("label update re-sealed or failed: %v", err)
	}
	// The same credential value again (a provider update that repeats it)
	// writes nothing: the stored sealed bytes are kept, not re-sealed.
	same, err := s.UpdateProvider(ctx, "default", "nv", store.Preconditions{}, func(p *shoalv1.Provider) error {
		p.Credentials["NVIDIA_API_KEY"] = secret
		return nil
	})
	if err != nil || same.Credentials["NVIDIA_API_KEY"] != before || same.Meta.ResourceVersion != up.Meta.ResourceVersion {
		t.Fatalf("repeating the credential: rv %d → %d, sealed bytes kept %v, err %v; want no write",
			up.Meta.ResourceVersion, same.GetMeta().GetResourceVersion(), same.GetCredentials()["NVIDIA_API_KEY"] == before, err)
	}
	// A new value is sealed anew.
	changed, err := s.UpdateProvider(ctx, "default", "nv", store.Preconditions{}, func(p *shoalv1.Provider) error {
		p.Credentials["NVIDIA_API_KEY"] = secret + "-new"
		return nil
	})
	if err != nil || changed.Credentials["NVIDIA_API_KEY"] == before || rawHas(t, c, secret+"-new") {
		t.Fatalf("a new value: err %v, still the old bytes %v", err, changed.GetCredentials()["NVIDIA_API_KEY"] == before)
	}
	if creds, err := s.OpenCredentials(changed); err != nil || creds["NVIDIA_API_KEY"] != secret+"-new" {
		t.Fatalf("open the new value: %v", err)
	}
	if _, err := s.UpdateProvider(ctx, "default", "nv", store.Preconditions{}, func(p *shoalv1.Provider) error {
		p.Credentials["NVIDIA_API_KEY"] = secret
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// A node without the key: a clear per-provider error, the list intact.
	keyless := store.New(c, store.Options{})
	if _, err := keyless.CreateProvider(ctx, &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "plain"}, Type: shoalv1.ProviderType_GENERIC,
		Credentials: map[string]string{"TOKEN": "plain-token-987"}}); err != nil {
		t.Fatal(err)
	}
	page, err := keyless.ListProviders(ctx, "", store.ListOptions{}, nil)
	if err != nil || len(page.Items) != 2 {
		t.Fatalf("keyless list: %d, %v", len(page.Items), err)
	}
	nv, _ := keyless.GetProvider(ctx, "default", "nv")
	if _, err := keyless.OpenCredentials(nv); err == nil || !strings.Contains(err.Error(), `"nv"`) || !strings.Contains(err.Error(), `"k1"`) || strings.Contains(err.Error(), secret) {
		t.Fatalf("keyless open: %v", err)
	}

	// Rotation to k2 (a ring that keeps k1 to read with).
	_, both := ring(t, file1, "k2")
	r := store.New(c, store.Options{Keys: both})
	for _, name := range []string{"nv", "plain"} {
		changed, err := r.RotateCredentials(ctx, "default", name)
		if err != nil || !changed {
			t.Fatalf("rotate %s: %v %v", name, changed, err)
		}
		changed, err = r.RotateCredentials(ctx, "default", name)
		if err != nil || changed {
			t.Fatalf("rotate %s again: %v %v", name, changed, err)
		}
	}
	if rawHas(t, c, "plain-token-987") || rawHas(t, c, secret) {
		t.Fatal("plaintext left after rotation")
	}
	for _, name := range []string{"nv", "plain"} {
		p, _ := r.GetProvider(ctx, "default", name)
		for k, v := range p.Credentials {
			if key, _ := encryption.KeyOf(v); key != "k2" {
				t.Fatalf("%s %s is under %q after rotation", name, k, key)
			}
		}
	}
	nv, _ = r.GetProvider(ctx, "default", "nv")
	if creds, err := r.OpenCredentials(nv); err != nil || creds["NVIDIA_API_KEY"] != secret {
		t.Fatalf("after rotation: %v %v", creds, err)
	}
}

// The cluster's key record: the first node with a key ring records its
// key; a node without a ring, without the cluster's key, with another
// secret under its name, or that would seal with a retired key is refused
// at start; a rotation is refused while a live node seals with another key,
// and retires the key it rotates away from.
func TestKeyRingAdmission(t *testing.T) {
	t.Parallel()
	_, c := newStore(t)
	ctx := ctxT(t)
	with := func(r *encryption.KeyRing) *store.Store { return store.New(c, store.Options{Keys: r}) }
	refused := func(what string, err error, want string) {
		t.Helper()
		if shoal.KindOf(err) != shoal.KindFailedPrecondition || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v; want FAILED_PRECONDITION saying %q", what, err, want)
		}
	}
	if err := with(nil).AdmitKeyRing(ctx); err != nil {
		t.Fatalf("no ring, no record: %v", err)
	}
	if resp, err := c.Get(ctx, "/shoal/cluster/encryption"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("a node without a ring recorded something: %v %v", resp, err)
	}
	a1, r1 := ring(t, nil, "k1")
	if err := with(r1).AdmitKeyRing(ctx); err != nil {
		t.Fatalf("first ring: %v", err)
	}
	if err := with(r1).AdmitKeyRing(ctx); err != nil {
		t.Fatalf("the same ring again: %v", err)
	}
	refused("no ring", with(nil).AdmitKeyRing(ctx), "no --encryption-key-file")
	_, other := ring(t, nil, "k1")
	refused("another k1", with(other).AdmitKeyRing(ctx), "another secret")
	a12, r12 := ring(t, a1, "k2")
	if err := with(r12).AdmitKeyRing(ctx); err != nil {
		t.Fatalf("k1 and k2, k2 current, before the rotation: %v", err)
	}
	// Nodes register with their key; n1 still seals with k1.
	reg := func(st *store.Store, name string, r *encryption.KeyRing) error {
		l, err := c.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		return st.RegisterNode(ctx, store.Registration{Node: &shoalv1.Node{Name: name, Address: name + ":7443", EncryptionKey: r.ID()}, Instance: name}, l.ID)
	}
	if err := reg(with(r1), "n1", r1); err != nil {
		t.Fatal(err)
	}
	if err := reg(with(r12), "n2", r12); err != nil {
		t.Fatal(err)
	}
	refused("rotation with a node on k1", with(r12).BeginRotation(ctx), "n1 ("+r1.ID()+")")
	if err := reg(with(r12), "n1", r12); err != nil { // n1 restarted with the new file
		t.Fatal(err)
	}
	if err := with(r12).BeginRotation(ctx); err != nil {
		t.Fatalf("rotation to k2: %v", err)
	}
	if err := with(r12).BeginRotation(ctx); err != nil {
		t.Fatalf("rotation to k2 again (resumed): %v", err)
	}
	refused("the old file", with(r1).AdmitKeyRing(ctx), `lacks key "k2"`)
	refused("registering with the old file", reg(with(r1), "n3", r1), `lacks key "k2"`)
	back, err := encryption.Parse([]byte(strings.Replace(string(a12), "current: k2", "current: k1", 1)))
	if err != nil {
		t.Fatal(err)
	}
	refused("both keys, k1 current", with(back).AdmitKeyRing(ctx), `rotated away from it (to "k2"`)
	refused("rotation back to k1", with(back).BeginRotation(ctx), "rotated away from already")
	_, r123 := ring(t, a12, "k3")
	if err := with(r123).AdmitKeyRing(ctx); err != nil {
		t.Fatalf("k3 added: %v", err)
	}
	refused("rotation to k3 while n1 and n2 seal with k2", with(r123).BeginRotation(ctx), "n1 ("+r12.ID()+"); n2 ("+r12.ID()+")")
	for _, n := range []string{"n1", "n2"} {
		if err := reg(with(r123), n, r123); err != nil {
			t.Fatal(err)
		}
	}
	if err := with(r123).BeginRotation(ctx); err != nil {
		t.Fatalf("rotation to k3: %v", err)
	}
	refused("k1 current after two rotations", with(back).AdmitKeyRing(ctx), `lacks key "k3"`)
	if _, err := c.Put(ctx, "/shoal/cluster/encryption", "{"); err != nil {
		t.Fatal(err)
	}
	if err := with(r123).AdmitKeyRing(ctx); shoal.KindOf(err) != shoal.KindDataLoss {
		t.Fatalf("a damaged record: %v", err)
	}
}

// A rotation under concurrent writers (label changes and new credential
// values through the update loop, as on the other nodes, all sealing with
// k2) loses no write: afterwards every value is under k2 and opens to the
// last value written, every label is the last one written.
func TestRotationUnderConcurrentWriters(t *testing.T) {
	t.Parallel()
	c, _ := testenv.Etcd(t)
	ctx := ctxT(t)
	file1, k1 := ring(t, nil, "k1")
	old := store.New(c, store.Options{Keys: k1})
	const n = 12
	for i := range n {
		if _, err := old.CreateProvider(ctx, &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Labels: map[string]string{"v": "0"}},
			Type: shoalv1.ProviderType_GENERIC, Credentials: map[string]string{"TOKEN": "t-0", "OTHER": "o-0"}}); err != nil {
			t.Fatal(err)
		}
	}
	_, both := ring(t, file1, "k2")
	rot, writer := store.New(c, store.Options{Keys: both}), store.New(c, store.Options{Keys: both})
	const writes = 15
	var wg sync.WaitGroup
	errs := make(chan error, 3*n)
	for i := range n {
		name := fmt.Sprintf("p%d", i)
		wg.Go(func() { // labels
			for w := 1; w <= writes; w++ {
				if _, err := writer.UpdateProvider(ctx, "default", name, store.Preconditions{}, func(p *shoalv1.Provider) error {
					p.Meta.Labels["v"] = fmt.Sprint(w)
					return nil
				}); err != nil {
					errs <- err
					return
				}
			}
		})
		wg.Go(func() { // a credential's value
			for w := 1; w <= writes; w++ {
				if _, err := writer.UpdateProvider(ctx, "default", name, store.Preconditions{}, func(p *shoalv1.Provider) error {
					p.Credentials["TOKEN"] = fmt.Sprintf("t-%d", w)
					return nil
				}); err != nil {
					errs <- err
					return
				}
			}
		})
		wg.Go(func() { // the rotation, twice (a resumed one)
			for range 2 {
				if _, err := rot.RotateCredentials(ctx, "default", name); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range n {
		name := fmt.Sprintf("p%d", i)
		p, err := rot.GetProvider(ctx, "default", name)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range p.Credentials {
			if key, _ := encryption.KeyOf(v); key != "k2" {
				t.Errorf("%s %s is under %q", name, k, key)
			}
		}
		creds, err := rot.OpenCredentials(p)
		if err != nil || creds["TOKEN"] != fmt.Sprintf("t-%d", writes) || creds["OTHER"] != "o-0" || p.Meta.Labels["v"] != fmt.Sprint(writes) {
			t.Errorf("%s: credentials %v (%v), label %q; want t-%d, o-0, %d", name, creds, err, p.Meta.Labels["v"], writes, writes)
		}
	}
	if rawHas(t, c, "t-0") || rawHas(t, c, "o-0") {
		t.Fatal("a plaintext value in etcd")
	}
}

// withoutKey is a key file's content with the key of that name left out.
func withoutKey(t *testing.T, data []byte, name string) []byte {
	t.Helper()
	var f struct {
		Current string              `json:"current"`
		Keys    []map[string]string `json:"keys"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	f.Keys = slices.DeleteFunc(f.Keys, func(k map[string]string) bool { return k["name"] == name })
	out, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A key file without a retired key that stored credentials still use is
// refused at start, naming the key and how many records need it; once the
// rotation has re-sealed them all, the same file is admitted.
func TestKeyRingLackingARetiredKeyInUse(t *testing.T) {
	t.Parallel()
	c, _ := testenv.Etcd(t)
	ctx := ctxT(t)
	with := func(r *encryption.KeyRing) *store.Store { return store.New(c, store.Options{Keys: r}) }
	file1, r1 := ring(t, nil, "k1")
	if err := with(r1).AdmitKeyRing(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		creds := map[string]string{"TOKEN": "t-" + name, "OTHER": "o-" + name}
		if name == "c" {
			creds = nil // nothing sealed: needs no key
		}
		if _, err := with(r1).CreateProvider(ctx, &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: name}, Type: shoalv1.ProviderType_GENERIC, Credentials: creds}); err != nil {
			t.Fatal(err)
		}
	}
	file12, r12 := ring(t, file1, "k2")
	if err := with(r12).BeginRotation(ctx); err != nil {
		t.Fatal(err)
	}
	// Only "a" is re-sealed: the rotation stopped half-way.
	if _, err := with(r12).RotateCredentials(ctx, "default", "a"); err != nil {
		t.Fatal(err)
	}
	only2, err := encryption.Parse(withoutKey(t, file12, "k1"))
	if err != nil {
		t.Fatal(err)
	}
	if fp, _ := only2.Fingerprint("k2"); fp != func() string { f, _ := r12.Fingerprint("k2"); return f }() {
		t.Fatal("the test's k2-only ring holds another k2")
	}
	err = with(only2).AdmitKeyRing(ctx)
	if shoal.KindOf(err) != shoal.KindFailedPrecondition || !strings.Contains(err.Error(), `lacks key "k1"`) || !strings.Contains(err.Error(), "1 provider record(s)") {
		t.Fatalf("a ring without k1 while b is sealed with it: %v; want FAILED_PRECONDITION naming k1 and 1 record", err)
	}
	if err := with(r12).AdmitKeyRing(ctx); err != nil {
		t.Fatalf("the ring with both keys: %v", err)
	}
	if _, err := with(r12).RotateCredentials(ctx, "default", "b"); err != nil {
		t.Fatal(err)
	}
	if err := with(only2).AdmitKeyRing(ctx); err != nil {
		t.Fatalf("a ring without k1 once nothing is sealed with it: %v", err)
	}
}
