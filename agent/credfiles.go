package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"maps"
	"slices"
	"time"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/store"
)

// Credentials as files: besides the environment a container is created
// with (which no engine can change afterwards), the current credentials
// of every provider attached to a running sandbox are files in it,
// /run/shoal/providers/<provider>/<KEY> (docker.CredentialDir), on a tmpfs
// of the container's own: in memory, never on the host's disk. They are
// written whenever what they should hold changes: an attach, a detach, a
// provider update (rotation), a start of the container (which empties its
// tmpfs). The agent follows provider changes with a watch of its own
// (Start) and queues the sandboxes of this node that use the provider, so
// a rotation reaches their files within a reconcile (well under 2 s). The
// set is replaced all at once (docker/credfiles.go), never file by file.
//
// What was written is remembered per sandbox as a fingerprint of the
// files and the container's start time, so an unchanged set costs a
// provider read from the cache and nothing else. A write the container
// refuses (no tmpfs in a container made before shoal mounted one, an
// image without sh or tar) is reported as the condition CredentialFiles
// False and not retried until something changes; an engine that fails is
// retried with the reconcile.

// ConditionCredentialFiles says whether the credential files are current.
const ConditionCredentialFiles = "CredentialFiles"

// credentialFiles is what the files of sb should hold: provider → key →
// value. A provider that cannot be read gets no files (its error is
// returned).
func (a *Agent) credentialFiles(ctx context.Context, sb *shoalv1.Sandbox) (map[string]map[string]string, error) {
	files := map[string]map[string]string{}
	for _, p := range sb.GetSpec().GetProviders() {
		prov, err := a.cfg.Store.GetProvider(ctx, sb.Meta.Workspace, p)
		if err != nil {
			return nil, err
		}
		creds, err := a.cfg.Store.OpenCredentials(prov)
		if err != nil {
			return nil, err
		}
		files[p] = creds
	}
	return files, nil
}

// fingerprint identifies a set of files written into the container that
// started at started.
func fingerprint(files map[string]map[string]string, started time.Time) string {
	h := sha256.New()
	h.Write([]byte(started.UTC().Format(time.RFC3339Nano)))
	for _, p := range slices.Sorted(maps.Keys(files)) {
		h.Write([]byte{0})
		h.Write([]byte(p))
		for _, k := range slices.Sorted(maps.Keys(files[p])) {
			h.Write([]byte{1})
			h.Write([]byte(k))
			h.Write([]byte{2})
			h.Write([]byte(files[p][k]))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// syncCredentialFiles brings a running container's credential files up to
// date, if they are not.
func (a *Agent) syncCredentialFiles(ctx context.Context, sb *shoalv1.Sandbox, id string, st shoal.ContainerState) error {
	if !st.Running || st.Paused || wantStopped(sb) || sb.Meta.DeletionTimestamp != nil {
		return nil
	}
	files, err := a.credentialFiles(ctx, sb)
	if err != nil {
		if shoal.KindOf(err) == shoal.KindNotFound {
			return nil // a provider being detached or deleted: the next change queues it
		}
		return err
	}
	fp := fingerprint(files, st.StartedAt)
	uid := sb.Meta.Uid
	if len(files) == 0 && condition(sb.GetStatus(), ConditionCredentialFiles) == nil {
		// No provider, and none ever written: nothing to write or remove
		// (an exec saved on every create and start of such a sandbox).
		a.mu.Lock()
		a.credFP[uid] = fp
		a.mu.Unlock()
		return nil
	}
	a.mu.Lock()
	same := a.credFP[uid] == fp
	a.mu.Unlock()
	if same {
		return nil
	}
	werr := a.cfg.Runtime.WriteCredentialFiles(ctx, id, files)
	if werr != nil && shoal.KindOf(werr) != shoal.KindFailedPrecondition {
		return werr // the engine: retried
	}
	a.mu.Lock()
	a.credFP[uid] = fp
	a.mu.Unlock()
	n := 0
	for _, f := range files {
		n += len(f)
	}
	return a.setStatus(ctx, sb, func(s *shoalv1.SandboxStatus) {
		if werr != nil {
			store.SetCondition(s, ConditionCredentialFiles, "False", "NotWritten", werr.Error())
			return
		}
		if n == 0 && condition(s, ConditionCredentialFiles) == nil {
			return // no provider, never had one: nothing to say
		}
		store.SetCondition(s, ConditionCredentialFiles, "True", "Written", "")
	})
}

// providerUsers indexes which of this node's sandboxes use which
// provider, from the sandbox watch, so that a provider change queues
// them (Start).
type providerUsers struct {
	byProvider map[string]map[item]bool // "<ws>/<provider>" → sandboxes
	of         map[item][]string        // sandbox → its "<ws>/<provider>"s
}

func newProviderUsers() *providerUsers {
	return &providerUsers{byProvider: map[string]map[item]bool{}, of: map[item][]string{}}
}

// set records sb's providers and reports whether they changed.
func (u *providerUsers) set(it item, sb *shoalv1.Sandbox) bool {
	var refs []string
	if sb != nil {
		for _, p := range sb.GetSpec().GetProviders() {
			refs = append(refs, it.ws+"/"+p)
		}
	}
	old, known := u.of[it]
	if known && slices.Equal(old, refs) {
		return false
	}
	for _, r := range old {
		delete(u.byProvider[r], it)
		if len(u.byProvider[r]) == 0 {
			delete(u.byProvider, r)
		}
	}
	if sb == nil {
		delete(u.of, it)
		return known
	}
	u.of[it] = refs
	for _, r := range refs {
		if u.byProvider[r] == nil {
			u.byProvider[r] = map[item]bool{}
		}
		u.byProvider[r][it] = true
	}
	return known || len(refs) > 0
}

func (u *providerUsers) reset() { clear(u.byProvider); clear(u.of) }

// users are the sandboxes that use a provider.
func (u *providerUsers) users(ws, name string) []item {
	return slices.Collect(maps.Keys(u.byProvider[ws+"/"+name]))
}
