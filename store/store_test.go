package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/store"
)

func newStore(t *testing.T) (*store.Store, *clientv3.Client) {
	c, _ := testenv.Etcd(t)
	return store.New(c, store.Options{}), c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func sandbox(name string, providers ...string) *shoalv1.Sandbox {
	return &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: name, Labels: map[string]string{"app": "x"}},
		Spec: &shoalv1.SandboxSpec{Image: "shoal/sandbox:dev", Providers: providers},
	}
}

func provider(name string) *shoalv1.Provider {
	return &shoalv1.Provider{
		Meta:        &shoalv1.ObjectMeta{Name: name},
		Type:        shoalv1.ProviderType_NVIDIA,
		Credentials: map[string]string{"NVIDIA_API_KEY": "secret"},
	}
}

func mustKind(t *testing.T, err error, k shoal.Kind) {
	t.Helper()
	if shoal.KindOf(err) != k {
		t.Fatalf("error %v: kind %v, want %v", err, shoal.KindOf(err), k)
	}
}

func TestResourceVersionIsModRevision(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	sb, err := s.CreateSandbox(ctx, sandbox("a"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, s.SandboxKey("default", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sb.Meta.ResourceVersion, resp.Kvs[0].ModRevision; got != want {
		t.Fatalf("resource_version %d, ModRevision %d", got, want)
	}
	if sb.Meta.Uid == "" || sb.Meta.CreatedAt == nil || sb.Status.Phase != shoalv1.SandboxPhase_PROVISIONING {
		t.Fatalf("create did not fill uid/created_at/phase: %v", sb)
	}
	_, err = s.CreateSandbox(ctx, sandbox("a"))
	mustKind(t, err, shoal.KindAlreadyExists)
}

func TestNoopUpdateWritesNothing(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := ctxT(t)
	sb, err := s.CreateSandbox(ctx, sandbox("a"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.UpdateSandbox(ctx, "default", "a", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
		sb.Meta.Labels["app"] = "x"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Meta.ResourceVersion != sb.Meta.ResourceVersion {
		t.Fatalf("no-op update moved resource_version %d -> %d", sb.Meta.ResourceVersion, got.Meta.ResourceVersion)
	}
}

func TestUpdatePreconditions(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := ctxT(t)
	sb, _ := s.CreateSandbox(ctx, sandbox("a"))
	set := func(v string) func(*shoalv1.Sandbox) error {
		return func(sb *shoalv1.Sandbox) error { sb.Meta.Labels["v"] = v; return nil }
	}
	if _, err := s.UpdateSandbox(ctx, "default", "a", store.Preconditions{ResourceVersion: sb.Meta.ResourceVersion}, set("1")); err != nil {
		t.Fatal(err)
	}
	_, err := s.UpdateSandbox(ctx, "default", "a", store.Preconditions{ResourceVersion: sb.Meta.ResourceVersion}, set("2"))
	mustKind(t, err, shoal.KindConflict)
	_, err = s.UpdateSandbox(ctx, "default", "a", store.Preconditions{UID: "other"}, set("3"))
	mustKind(t, err, shoal.KindConflict)
	_, err = s.UpdateSandbox(ctx, "default", "missing", store.Preconditions{}, set("3"))
	mustKind(t, err, shoal.KindNotFound)
	got, _ := s.GetSandbox(ctx, "default", "a")
	if got.Meta.Labels["v"] != "1" {
		t.Fatalf("failed preconditions wrote: %v", got.Meta.Labels)
	}
}

// Concurrent read-modify-writes through the loop lose no update.
func TestUpdateLoopLosesNothing(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := ctxT(t)
	if _, err := s.CreateSandbox(ctx, sandbox("a")); err != nil {
		t.Fatal(err)
	}
	const workers, each = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				_, err := s.UpdateSandbox(ctx, "default", "a", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
					sb.Meta.Annotations = setKey(sb.Meta.Annotations, fmt.Sprintf("w%d-%d", w, i))
					return nil
				})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, _ := s.GetSandbox(ctx, "default", "a")
	if len(got.Meta.Annotations) != workers*each {
		t.Fatalf("%d annotations, want %d: updates were lost", len(got.Meta.Annotations), workers*each)
	}
}

func setKey(m map[string]string, k string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = "1"
	return m
}

// A byte-identical rewrite of the key by another client bumps ModRevision
// only; marking for deletion still succeeds.
func TestDeleteSurvivesIdenticalRewrite(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	if _, err := s.CreateSandbox(ctx, sandbox("a")); err != nil {
		t.Fatal(err)
	}
	key := s.SandboxKey("default", "a")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	rewrites := 0
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := c.Get(ctx, key)
			if err != nil || len(resp.Kvs) == 0 {
				return
			}
			if _, err := c.Put(ctx, key, string(resp.Kvs[0].Value)); err == nil {
				rewrites++
			}
		}
	}()
	for i := range 50 {
		if _, err := s.UpdateSandbox(ctx, "default", "a", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
			sb.Meta.Labels["i"] = fmt.Sprint(i)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := s.MarkSandboxDeleting(ctx, "default", "a", store.Preconditions{})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("delete under identical rewrites: %v", err)
	}
	if sb.Status.Phase != shoalv1.SandboxPhase_DELETING || sb.Meta.DeletionTimestamp == nil {
		t.Fatalf("not marked: %v", sb)
	}
	if rewrites == 0 {
		t.Fatal("the rewriter never wrote; the test proved nothing")
	}
}

func TestProviderDeleteRefusedWhileAttached(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := ctxT(t)
	if _, err := s.CreateProvider(ctx, provider("p")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSandbox(ctx, sandbox("a", "p")); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.DeleteProvider(ctx, "default", "p", store.Preconditions{})
	mustKind(t, err, shoal.KindFailedPrecondition)
	if want := `provider "p" is attached to sandbox(es): a`; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name the sandbox (%q)", err, want)
	}
	// Once a is DELETING the provider becomes terminating, not deleted.
	sb, err := s.MarkSandboxDeleting(ctx, "default", "a", store.Preconditions{})
	if err != nil {
		t.Fatal(err)
	}
	deleted, p, err := s.DeleteProvider(ctx, "default", "p", store.Preconditions{})
	if err != nil || deleted || p.Meta.DeletionTimestamp == nil {
		t.Fatalf("delete while only DELETING holders: deleted=%v p=%v err=%v", deleted, p, err)
	}
	// A terminating provider takes no new attachments.
	_, err = s.CreateSandbox(ctx, sandbox("b", "p"))
	mustKind(t, err, shoal.KindFailedPrecondition)
	// Finalize waits for the holder.
	gone, _, err := s.FinalizeProvider(ctx, "default", "p", nil)
	if err != nil || gone {
		t.Fatalf("finalize with a holder: gone=%v err=%v", gone, err)
	}
	if _, err := s.RemoveSandbox(ctx, "default", "a", sb.Meta.Uid, nil, 0); err != nil {
		t.Fatal(err)
	}
	gone, _, err = s.FinalizeProvider(ctx, "default", "p", nil)
	if err != nil || !gone {
		t.Fatalf("finalize after release: gone=%v err=%v", gone, err)
	}
	_, err = s.GetProvider(ctx, "default", "p")
	mustKind(t, err, shoal.KindNotFound)
}

func TestAttachDetach(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	s.CreateProvider(ctx, provider("p"))
	if _, err := s.CreateSandbox(ctx, sandbox("a")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AttachProvider(ctx, "default", "a", "missing", store.Preconditions{}); shoal.KindOf(err) != shoal.KindFailedPrecondition {
		t.Fatalf("attach missing provider: %v", err)
	}
	if _, attached, err := s.AttachProvider(ctx, "default", "a", "p", store.Preconditions{}); err != nil || !attached {
		t.Fatalf("attach: attached %v, %v", attached, err)
	}
	if _, attached, err := s.AttachProvider(ctx, "default", "a", "p", store.Preconditions{}); err != nil || attached {
		t.Fatalf("attach again: attached %v, %v; want a no-op", attached, err)
	}
	if n := countPrefix(t, c, "/shoal/attach/default/p/"); n != 1 {
		t.Fatalf("%d attachment keys, want 1", n)
	}
	if _, detached, err := s.DetachProvider(ctx, "default", "a", "p", store.Preconditions{}); err != nil || !detached {
		t.Fatalf("detach: detached %v, %v", detached, err)
	}
	if _, detached, err := s.DetachProvider(ctx, "default", "a", "p", store.Preconditions{}); err != nil || detached {
		t.Fatalf("detach again: detached %v, %v; want a no-op", detached, err)
	}
	if n := countPrefix(t, c, "/shoal/attach/default/p/"); n != 0 {
		t.Fatalf("%d attachment keys after detach, want 0", n)
	}
	if deleted, _, err := s.DeleteProvider(ctx, "default", "p", store.Preconditions{}); err != nil || !deleted {
		t.Fatalf("delete detached provider: %v %v", deleted, err)
	}
}

// Stale delete by uid never touches a same-name replacement.
func TestStaleUIDDeleteSparesReplacement(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := ctxT(t)
	old, _ := s.CreateSandbox(ctx, sandbox("a"))
	if _, err := s.MarkSandboxDeleting(ctx, "default", "a", store.Preconditions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveSandbox(ctx, "default", "a", old.Meta.Uid, nil, 0); err != nil {
		t.Fatal(err)
	}
	repl, err := s.CreateSandbox(ctx, sandbox("a"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.MarkSandboxDeleting(ctx, "default", "a", store.Preconditions{UID: old.Meta.Uid})
	mustKind(t, err, shoal.KindConflict)
	// The coordinator's removal with the old uid is a no-op too.
	if _, err := s.RemoveSandbox(ctx, "default", "a", old.Meta.Uid, nil, 0); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSandbox(ctx, "default", "a")
	if err != nil || got.Meta.Uid != repl.Meta.Uid || got.Meta.DeletionTimestamp != nil {
		t.Fatalf("replacement was touched: %v %v", got, err)
	}
}

func TestFencedWriteRefused(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	sb, _ := s.CreateSandbox(ctx, sandbox("a"))
	s.MarkSandboxDeleting(ctx, "default", "a", store.Preconditions{})
	put, err := c.Put(ctx, "/shoal/leader/x", "me")
	if err != nil {
		t.Fatal(err)
	}
	fence := fence{"/shoal/leader/x", put.Header.Revision}
	c.Delete(ctx, "/shoal/leader/x")
	c.Put(ctx, "/shoal/leader/x", "someone else")
	_, err = s.RemoveSandbox(ctx, "default", "a", sb.Meta.Uid, fence, 0)
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("fenced write: %v, want ErrFenced", err)
	}
	if _, err := s.GetSandbox(ctx, "default", "a"); err != nil {
		t.Fatalf("a fenced-out write was applied: %v", err)
	}
}

// Provider delete races sandbox create and attach: exactly one wins, never
// an attachment to a missing provider, never a provider deleted while a
// live sandbox references it. Each round has names of its own, so the 500
// rounds run in 4 lanes at once (more interleavings, a quarter the wait).
func TestProviderDeleteRacesCreateAndAttach(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	rounds := 500
	if testing.Short() {
		rounds = 50
	}
	const lanes = 4
	var wg sync.WaitGroup
	failed := make(chan error, lanes)
	for lane := range lanes {
		wg.Go(func() {
			for r := lane; r < rounds; r += lanes {
				if err := providerRaceRound(ctx, s, r); err != nil {
					failed <- fmt.Errorf("round %d: %w", r, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	checkAttachInvariant(t, ctx, s, c)
}

// providerRaceRound is one round: provider pN and sandbox hostN exist;
// creating newN with pN, attaching pN to hostN and deleting pN race.
func providerRaceRound(ctx context.Context, s *store.Store, r int) error {
	pn := fmt.Sprintf("p%d", r)
	if _, err := s.CreateProvider(ctx, provider(pn)); err != nil {
		return err
	}
	// "host" exists before the round so attach has a live sandbox.
	host := fmt.Sprintf("host%d", r)
	if _, err := s.CreateSandbox(ctx, sandbox(host)); err != nil {
		return err
	}
	var wg sync.WaitGroup
	var createErr, attachErr, delErr error
	var deleted bool
	wg.Go(func() { _, createErr = s.CreateSandbox(ctx, sandbox(fmt.Sprintf("new%d", r), pn)) })
	wg.Go(func() { _, _, attachErr = s.AttachProvider(ctx, "default", host, pn, store.Preconditions{}) })
	wg.Go(func() { deleted, _, delErr = s.DeleteProvider(ctx, "default", pn, store.Preconditions{}) })
	wg.Wait()
	for _, err := range []error{createErr, attachErr, delErr} {
		if err != nil && shoal.KindOf(err) != shoal.KindFailedPrecondition {
			return fmt.Errorf("unexpected error %w", err)
		}
	}
	if delErr == nil && !deleted {
		return errors.New("provider terminating with no DELETING holder")
	}
	if delErr == nil && (createErr == nil || attachErr == nil) {
		return fmt.Errorf("provider deleted and an attach won too (create=%v attach=%v)", createErr, attachErr)
	}
	if delErr != nil && createErr != nil && attachErr != nil {
		return fmt.Errorf("nobody won: %v / %v / %v", createErr, attachErr, delErr)
	}
	return nil
}

// checkAttachInvariant: every live sandbox's providers exist and hold its
// attachment key; every attachment key points at an existing provider.
func checkAttachInvariant(t *testing.T, ctx context.Context, s *store.Store, c *clientv3.Client) {
	t.Helper()
	page, err := s.ListSandboxes(ctx, "", store.ListOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range page.Items {
		if sb.Meta.DeletionTimestamp != nil {
			continue
		}
		for _, p := range sb.Spec.Providers {
			if _, err := s.GetProvider(ctx, sb.Meta.Workspace, p); err != nil {
				t.Fatalf("live sandbox %s references provider %s: %v", sb.Meta.Name, p, err)
			}
			key := fmt.Sprintf("/shoal/attach/%s/%s/%s", sb.Meta.Workspace, p, sb.Meta.Name)
			if n := countPrefix(t, c, key); n != 1 {
				t.Fatalf("live sandbox %s has no attachment key for %s", sb.Meta.Name, p)
			}
		}
	}
	resp, err := c.Get(ctx, "/shoal/attach/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		parts := strings.Split(string(kv.Key), "/")
		ws, p, sb := parts[3], parts[4], parts[5]
		if _, err := s.GetProvider(ctx, ws, p); err != nil {
			t.Fatalf("attachment %s of %s to missing provider: %v", kv.Key, sb, err)
		}
	}
}

func countPrefix(t *testing.T, c *clientv3.Client, p string) int64 {
	t.Helper()
	resp, err := c.Get(context.Background(), p, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}
