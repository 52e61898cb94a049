package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiserver"
	"shoal/embedetcd"
	"shoal/internal/testenv"
	"shoal/node"
	"shoal/store"
)

// maxLabels is the largest label set the validator accepts.
func maxLabels() map[string]string {
	l := map[string]string{}
	for i := range apiserver.MaxLabels {
		prefix := strings.Repeat("p", 249) + fmt.Sprintf(".x%02d", i)
		l[prefix+"/"+strings.Repeat("n", 61)+fmt.Sprintf("%02d", i)] = strings.Repeat("v", apiserver.MaxLabelValue)
	}
	return l
}

// fillMap grows m with entries of valueLen bytes until its encoding (as
// measured by size) is as close to limit as whole entries allow.
func fillMap(m map[string]string, keyf func(int) string, valueLen, limit int, size func() int) {
	for i := 0; ; i++ {
		k := keyf(i)
		m[k] = strings.Repeat("v", valueLen)
		if size() > limit {
			delete(m, k)
			// Top up with one shorter value.
			for n := valueLen - 1; n > 0; n-- {
				m[k] = strings.Repeat("v", n)
				if size() <= limit {
					return
				}
			}
			delete(m, k)
			return
		}
	}
}

func maxAnnotations() map[string]string {
	ann := map[string]string{}
	fillMap(ann, func(i int) string { return fmt.Sprintf("note-%03d", i) }, 4000, apiserver.MaxAnnotationSize,
		func() int { return proto.Size(&shoalv1.ObjectMeta{Annotations: ann}) })
	return ann
}

// maxSpec fills env up to the spec budget.
func maxSpec(providers []string) *shoalv1.SandboxSpec {
	spec := &shoalv1.SandboxSpec{Image: "shoal/sandbox:dev", Env: map[string]string{}, Providers: providers,
		Command: []string{"sleep", "3600"}}
	fillMap(spec.Env, func(i int) string { return fmt.Sprintf("BIG_%03d", i) }, 2100, apiserver.MaxSpecBytes,
		func() int { return proto.Size(spec) })
	return spec
}

func maxProvider(name string) *shoalv1.Provider {
	p := &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: name, Labels: maxLabels()}, Type: shoalv1.ProviderType_GENERIC,
		Credentials: map[string]string{}, Config: map[string]string{}}
	fillMap(p.Credentials, func(i int) string { return fmt.Sprintf("CRED_%02d", i) }, 8000, apiserver.MaxSpecBytes,
		func() int { return proto.Size(&shoalv1.Provider{Credentials: p.Credentials}) })
	return p
}

// Every limit together fits the store's budget, and the budget fits the
// request limit the embedded etcd is started with.
func TestLimitsFitTheStoreBudget(t *testing.T) {
	if store.MinEtcdRequestBytes > embedetcd.MaxRequestBytes {
		t.Fatalf("store needs etcd requests of %d bytes; the embedded member allows %d", store.MinEtcdRequestBytes, embedetcd.MaxRequestBytes)
	}
	if store.MinEtcdTxnOps > embedetcd.MaxTxnOps {
		t.Fatalf("store needs %d ops per Txn; the embedded member allows %d", store.MinEtcdTxnOps, embedetcd.MaxTxnOps)
	}
	now := timestamppb.Now()
	provs := make([]string, apiserver.MaxProviders)
	for i := range provs {
		provs[i] = strings.Repeat("p", 60) + fmt.Sprintf("%03d", i)
	}
	status := &shoalv1.SandboxStatus{Phase: shoalv1.SandboxPhase_ERROR, Node: strings.Repeat("n", 63),
		ContainerId: strings.Repeat("c", 64), Message: strings.Repeat("m", 1024)}
	for _, typ := range []string{"Provisioned", "ContainerPresent", "Paused", "Started"} {
		status.Conditions = append(status.Conditions, &shoalv1.Condition{Type: typ, Status: "Unknown", Reason: strings.Repeat("r", 64),
			Message: strings.Repeat("m", 1024), LastTransitionTime: now})
	}
	if n := proto.Size(status); n > apiserver.MaxStatusBytes {
		t.Fatalf("a full status takes %d bytes; the budget reserves %d", n, apiserver.MaxStatusBytes)
	}
	meta := func() *shoalv1.ObjectMeta {
		return &shoalv1.ObjectMeta{Uid: "0f8fad5b-d9cb-469f-a165-70867728950e", Name: strings.Repeat("a", 63), Workspace: strings.Repeat("w", 63),
			Labels: maxLabels(), Annotations: maxAnnotations(), CreatedAt: now, DeletionTimestamp: now}
	}
	spec := maxSpec(provs)
	if got := proto.Size(spec); got > apiserver.MaxSpecBytes || got < apiserver.MaxSpecBytes-4096 {
		t.Fatalf("test spec is %d bytes, want just under %d", got, apiserver.MaxSpecBytes)
	}
	sb := &shoalv1.Sandbox{Meta: meta(), Spec: spec, Status: status}
	p := maxProvider("p")
	p.Meta = meta()
	p.Config = nil
	for what, n := range map[string]int{"sandbox": proto.Size(sb), "provider": proto.Size(p)} {
		if n > store.MaxStoredBytes {
			t.Errorf("the largest %s the API accepts encodes to %d bytes, over store.MaxStoredBytes %d", what, n, store.MaxStoredBytes)
		}
	}
}

// The largest objects the API accepts go through their whole life:
// created, started, labelled, annotated, rotated, deleted; and objects
// just over a limit are INVALID_ARGUMENT naming the field, not
// UNAVAILABLE.
func TestLargestObjectsLiveTheirWholeLife(t *testing.T) {
	testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	c := n.Client
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	big := maxProvider("big")
	if _, err := c.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: big}); err != nil {
		t.Fatalf("create the largest provider: %v", err)
	}
	var provs []string
	for i := range apiserver.MaxProviders - 1 {
		name := fmt.Sprintf("small-%02d", i)
		provs = append(provs, name)
		if _, err := c.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{
			Meta: &shoalv1.ObjectMeta{Name: name}, Type: shoalv1.ProviderType_GENERIC, Credentials: map[string]string{fmt.Sprintf("TOKEN_%02d", i): "t"}}}); err != nil {
			t.Fatal(err)
		}
	}
	provs = append(provs, "big")
	sb := &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "huge", Labels: maxLabels(), Annotations: maxAnnotations()}, Spec: maxSpec(provs)}
	got, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: sb, Wait: true})
	if err != nil {
		t.Fatalf("create the largest sandbox: %v", err)
	}
	if got.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("largest sandbox is %s (%s), want READY", got.Status.Phase, got.Status.Message)
	}
	// Relabel every label, rewrite every annotation.
	set := map[string]string{}
	for k := range sb.Meta.Labels {
		set[k] = "other"
	}
	if _, err := c.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "huge", SetLabels: set}); err != nil {
		t.Fatalf("relabel the largest sandbox: %v", err)
	}
	ann := maxAnnotations()
	for k := range ann {
		ann[k] = strings.Repeat("w", len(ann[k]))
	}
	if _, err := c.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "huge", SetAnnotations: ann}); err != nil {
		t.Fatalf("annotate the largest sandbox: %v", err)
	}
	// Rotate the largest provider's credentials to other values of the
	// same size, while it is attached.
	rot := maxProvider("big")
	for k := range rot.Credentials {
		rot.Credentials[k] = strings.Repeat("r", len(rot.Credentials[k]))
	}
	if _, err := c.UpdateProvider(ctx, &shoalv1.UpdateProviderRequest{Provider: rot, UpdateCredentials: true, UpdateLabels: true}); err != nil {
		t.Fatalf("rotate the largest provider: %v", err)
	}
	if _, err := c.DetachProvider(ctx, &shoalv1.DetachProviderRequest{Name: "huge", Provider: "small-00"}); err != nil {
		t.Fatalf("detach from the largest sandbox: %v", err)
	}
	if _, err := c.AttachProvider(ctx, &shoalv1.AttachProviderRequest{Name: "huge", Provider: "small-00"}); err != nil {
		t.Fatalf("attach to the largest sandbox: %v", err)
	}
	if _, err := c.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "huge", Wait: true}); err != nil {
		t.Fatalf("delete the largest sandbox: %v", err)
	}
	for _, p := range provs {
		if _, err := c.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Name: p}); err != nil {
			t.Fatalf("delete provider %s after its sandbox: %v", p, err)
		}
	}

	// Just over the budget: each field within its own limit, the whole not.
	env := map[string]string{}
	for i := range 64 {
		env[fmt.Sprintf("E%02d", i)] = strings.Repeat("x", apiserver.MaxEnvValue)
	}
	creds := map[string]string{}
	for i := range apiserver.MaxCredentials {
		creds[fmt.Sprintf("C%02d", i)] = strings.Repeat("x", apiserver.MaxEnvValue)
	}
	over := maxSpec(nil)
	over.Env["ONE_MORE"] = strings.Repeat("x", 4096)
	for _, tc := range []struct {
		name, field string
		call        func() error
	}{
		{"64 env of 8 KiB", "sandbox.spec", func() error {
			_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "a"}, Spec: &shoalv1.SandboxSpec{Env: env}}})
			return err
		}},
		{"spec one entry over", "sandbox.spec", func() error {
			_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "a"}, Spec: over}})
			return err
		}},
		{"64 credentials of 8 KiB", "provider", func() error {
			_, err := c.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "p"}, Type: shoalv1.ProviderType_GENERIC, Credentials: creds}})
			return err
		}},
	} {
		err := tc.call()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("%s: %v; want INVALID_ARGUMENT naming %q", tc.name, err, tc.field)
		}
	}
	// Each provider within its budget, but together more environment than
	// the kernel starts a process with (found in review: the container
	// failed with "argument list too long" and showed STOPPED).
	var heavy []string
	for i := range 5 {
		name := fmt.Sprintf("heavy-%d", i)
		heavy = append(heavy, name)
		p := maxProvider(name)
		creds := map[string]string{}
		for k, v := range p.Credentials {
			creds[fmt.Sprintf("H%d_%s", i, k)] = v[:len(v)-8] // distinct keys, still within the budget
		}
		p.Credentials = creds
		if _, err := c.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: p}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "env-over"}, Spec: &shoalv1.SandboxSpec{Providers: heavy}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "sandbox.spec.providers") || !strings.Contains(err.Error(), "environment") {
		t.Fatalf("create with 1.25 MiB of credentials: %v", err)
	}
	pad := map[string]string{}
	for i := range 10 {
		pad[fmt.Sprintf("PAD_%d", i)] = strings.Repeat("p", 8000)
	}
	if _, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "env-fits"}, Spec: &shoalv1.SandboxSpec{Providers: heavy[:3], Env: pad}}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.AttachProvider(ctx, &shoalv1.AttachProviderRequest{Name: "env-fits", Provider: heavy[3]})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "environment") {
		t.Fatalf("attach past the environment limit: %v", err)
	}

	// An update that would take a provider over the budget with what it
	// keeps of the stored one is refused too.
	half := map[string]string{}
	for i := range 18 {
		half[fmt.Sprintf("K%02d", i)] = strings.Repeat("x", 7000)
	}
	if _, err := c.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "grow"}, Type: shoalv1.ProviderType_GENERIC, Credentials: half, Config: half}}); err != nil {
		t.Fatal(err)
	}
	more := map[string]string{}
	for i := range 30 {
		more[fmt.Sprintf("K%02d", i)] = strings.Repeat("y", 7000)
	}
	_, err = c.UpdateProvider(ctx, &shoalv1.UpdateProviderRequest{Provider: &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "grow"}, Credentials: more}, UpdateCredentials: true})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("update over the budget: %v, want INVALID_ARGUMENT", err)
	}
}

// Lists page by bytes as well as count: 80 sandboxes with 60 KiB of
// annotations each (4.8 MB) list completely through a client with gRPC's
// default 4 MiB receive limit, and through the CLI.
func TestListOfLargeRecordsFitsEveryPage(t *testing.T) {
	testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 80 {
		sb := &shoalv1.Sandbox{
			Meta: &shoalv1.ObjectMeta{Name: fmt.Sprintf("big-%02d", i), Annotations: map[string]string{"blob": strings.Repeat("a", 60<<10)}},
			Spec: &shoalv1.SandboxSpec{Image: "shoal/sandbox:dev"},
			// On no node of this test: no containers needed.
			Status: &shoalv1.SandboxStatus{Node: "elsewhere"},
		}
		if _, err := n.Store().CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	seen, pages, tok := 0, 0, ""
	for {
		resp, err := n.Client.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageToken: tok})
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		pages++
		seen += len(resp.Items)
		if size := proto.Size(resp); size > apiserver.MaxListPageBytes+store.MaxStoredBytes {
			t.Fatalf("page of %d bytes", size)
		}
		if tok = resp.NextPageToken; tok == "" {
			break
		}
	}
	if seen != 80 || pages < 3 {
		t.Fatalf("%d sandboxes over %d pages; want 80 over at least 3", seen, pages)
	}
	out, err := exec.CommandContext(ctx, testenv.Binary(t), "--endpoint", n.Addr(), "sandbox", "list", "-o", "json").Output()
	if err != nil {
		t.Fatalf("shoal sandbox list: %v", err)
	}
	var items struct{ Items []json.RawMessage }
	if err := json.Unmarshal(out, &items); err != nil || len(items.Items) != 80 {
		t.Fatalf("shoal sandbox list -o json: %d items, %v", len(items.Items), err)
	}
}

// A create whose reply was lost is retried with the same request id and
// gets its sandbox back, also when that sandbox took the last slot in the
// cluster; another create of the name is ALREADY_EXISTS, not "no node
// fits": the API's checks before the create refuse nothing placement
// would decide.
func TestCreateRetryOnAFullCluster(t *testing.T) {
	cfg := testenv.NodeConfig(t)
	cfg.Runtime, cfg.MaxSandboxes = node.RuntimeHollow, 1
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, time.Minute)
	req := &shoalv1.CreateSandboxRequest{RequestId: "retry-full-1", Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "last"}}}
	first, err := n.Client.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := n.Client.CreateSandbox(ctx, req)
	if err != nil || again.GetMeta().GetUid() != first.Meta.Uid {
		t.Fatalf("the same create again on a full cluster: %v %v; want the first attempt's sandbox (uid %s)", again.GetMeta().GetUid(), err, first.Meta.Uid)
	}
	_, err = n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{RequestId: "retry-full-2", Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "last"}}})
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("another create of the name: %v, want ALREADY_EXISTS", err)
	}
	_, err = n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "one-more"}}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "full (1/1)") {
		t.Fatalf("a new sandbox on the full cluster: %v, want FAILED_PRECONDITION naming the full node", err)
	}
}
