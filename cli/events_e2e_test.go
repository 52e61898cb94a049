package cli_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"shoal/cli"
	"shoal/internal/testenv"
)

// event is an event as `-o json` prints it.
type event struct {
	Workspace     string
	Sandbox       string
	SandboxUid    string `json:"sandbox_uid"`
	Severity      string
	Reason        string
	Message       string
	Details       map[string]string
	Node          string
	ReportingNode string `json:"reporting_node"`
	Reporter      string
	Count         int
}

func reasons(evs []event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Reason
	}
	return out
}

// listEvents runs an events command with -o json and decodes its items.
func listEvents(t *testing.T, bin, ep string, args ...string) []event {
	t.Helper()
	r := run(t, bin, ep, append(args, "-o", "json")...).must(t, 0, strings.Join(args, " "))
	var out struct{ Items []event }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("%s -o json: %v\n%s", strings.Join(args, " "), err, r.stdout)
	}
	return out.Items
}

// eventWatch is `shoal ... --watch -o json` running in the background:
// the events it printed so far, decoded as they come.
type eventWatch struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	evs  []event
	err  error
}

func watchEvents(t *testing.T, bin, ep string, args ...string) *eventWatch {
	t.Helper()
	return followEvents(t, bin, ep, append(args, "--watch")...)
}

// followEvents is an events command that follows (args name how: --watch,
// logs --egress -f) running in the background with -o json.
func followEvents(t *testing.T, bin, ep string, args ...string) *eventWatch {
	t.Helper()
	cmd := exec.Command(bin, append(args, "-o", "json")...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SHOAL_ENDPOINT=" + ep}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &eventWatch{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		dec := json.NewDecoder(out)
		for {
			var ev event
			err := dec.Decode(&ev)
			w.mu.Lock()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					w.err = err
				}
				w.mu.Unlock()
				return
			}
			w.evs = append(w.evs, ev)
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-w.done
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", strings.Join(args, " "), stderr.String())
		}
	})
	return w
}

func (w *eventWatch) seen() []event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.evs)
}

// only keeps the events whose reason is one of want, in their order.
func only(evs []event, want ...string) []string {
	var out []string
	for _, ev := range evs {
		if slices.Contains(want, ev.Reason) {
			out = append(out, ev.Reason)
		}
	}
	return out
}

// The test. On three nodes, a sandbox's owner is killed, and its
// history reads, in this order: Scheduled (by the API that took the
// create), Started (by the owner's agent), NodeLost and Fenced (by the
// leader, once the owner's lease expired and then its fence time
// passed), DeleteRequested (by the API that took the delete), Removed
// (by the leader, on the fence's proof). `sandbox describe` shows the
// sandbox with its node, its provider's keys (never the value) and those
// events; `shoal events --node` and a watch from before the create see
// them too.
func TestEventsOfAKilledOwner(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 3, OrphanGrace: time.Hour, Args: []string{"--node-ttl", nodeTTL.String()}})
	bin := testenv.Binary(t)
	front, owner := c.Addr(0), c.ID(2)
	both := c.Addr(0) + "," + c.Addr(1)
	watch := watchEvents(t, bin, c.Addr(1), "events")
	ownerWatch := watchEvents(t, bin, c.Addr(1), "events", "--node", owner)

	const secret = "nvapi-events-secret"
	runWith(t, bin, front, runOpts{env: []string{"NVIDIA_API_KEY=" + secret}},
		"provider", "create", "p", "--type", "nvidia", "--credential-from-env", "NVIDIA_API_KEY").must(t, 0, "provider create")
	run(t, bin, front, "sandbox", "create", "victim", "--node", owner, "--provider", "p", "--wait").must(t, 0, "create")
	uid := getSandbox(t, bin, front, "victim").Meta.Uid
	testenv.Eventually(t, 20*time.Second, "Scheduled, Created, Started", func() (bool, error) {
		evs := listEvents(t, bin, front, "sandbox", "events", "victim")
		return slices.Equal(reasons(evs), []string{"Scheduled", "Created", "Started"}), errors.New(strings.Join(reasons(evs), ","))
	})

	// describe, as a person reads it and as a script does.
	d := run(t, bin, front, "sandbox", "describe", "victim").must(t, 0, "describe")
	for _, want := range []string{"Name:", "victim", "UID:", uid, "Phase:", "READY", "Node:", owner + " (Ready", "Conditions:", "Provisioned",
		"Providers:", "NVIDIA_API_KEY=<redacted>", "Events:", "Scheduled", "assigned to node " + owner, "Started", "agent " + owner} {
		if !strings.Contains(d.stdout, want) {
			t.Fatalf("describe does not show %q:\n%s", want, d.stdout)
		}
	}
	if strings.Contains(d.stdout+d.stderr, secret) {
		t.Fatalf("describe printed the credential's value:\n%s", d.stdout)
	}
	var desc struct {
		Sandbox struct {
			Meta struct{ Name, Uid string }
		}
		Node      struct{ Name string }
		Providers []struct {
			Credentials map[string]string
		}
		Events []event
	}
	for _, format := range []string{"json", "yaml"} {
		r := run(t, bin, front, "sandbox", "describe", "victim", "-o", format).must(t, 0, "describe -o "+format)
		if strings.Contains(r.stdout, secret) {
			t.Fatalf("describe -o %s printed the credential's value", format)
		}
		if err := yaml.Unmarshal([]byte(r.stdout), &desc); err != nil { // YAML reads JSON too
			t.Fatalf("describe -o %s: %v\n%s", format, err, r.stdout)
		}
		if desc.Sandbox.Meta.Uid != uid || desc.Node.Name != owner || len(desc.Providers) != 1 || len(desc.Providers[0].Credentials) != 1 ||
			!slices.Equal(reasons(desc.Events), []string{"Scheduled", "Created", "Started"}) {
			t.Fatalf("describe -o %s: %+v\n%s", format, desc, r.stdout)
		}
	}

	killed := time.Now()
	c.Kill(2)
	testenv.Eventually(t, 2*nodeTTL+30*time.Second, "NodeLost and Fenced", func() (bool, error) {
		evs := listEvents(t, bin, both, "sandbox", "events", "victim")
		return slices.Contains(reasons(evs), "Fenced"), errors.New(strings.Join(reasons(evs), ","))
	})
	t.Logf("owner SIGKILL → Fenced listed: %s", time.Since(killed).Round(time.Millisecond))
	run(t, bin, front, "sandbox", "delete", "victim", "--wait").must(t, 0, "delete --wait")

	var evs []event
	testenv.Eventually(t, 20*time.Second, "Removed", func() (bool, error) {
		evs = listEvents(t, bin, both, "sandbox", "events", "victim")
		return slices.Contains(reasons(evs), "Removed"), errors.New(strings.Join(reasons(evs), ","))
	})
	want := []string{"Scheduled", "Started", "NodeLost", "Fenced", "DeleteRequested", "Removed"}
	if got := only(evs, want...); !slices.Equal(got, want) {
		t.Fatalf("the sandbox's events read %v; want, in order, %v (all: %v)", got, want, reasons(evs))
	}
	if got := reasons(evs); !slices.Equal(got, []string{"Scheduled", "Created", "Started", "NodeLost", "Fenced", "DeleteRequested", "Removed"}) {
		t.Fatalf("the sandbox's events are %v: more or fewer than the issue's and Created", got)
	}
	by := map[string]event{}
	for _, ev := range evs {
		by[ev.Reason] = ev
		if ev.SandboxUid != uid || ev.Node != owner {
			t.Errorf("%s is about uid %s on node %s; want %s on %s", ev.Reason, ev.SandboxUid, ev.Node, uid, owner)
		}
	}
	leader := by["NodeLost"].ReportingNode
	for reason, wantBy := range map[string]string{"Scheduled": "api " + c.ID(0), "Started": "agent " + owner, "DeleteRequested": "api " + c.ID(0),
		"NodeLost": "leader " + leader, "Fenced": "leader " + leader, "Removed": "leader " + leader} {
		if got := by[reason].Reporter + " " + by[reason].ReportingNode; got != wantBy {
			t.Errorf("%s recorded by %s; want %s", reason, got, wantBy)
		}
	}
	if leader == owner || leader == "" {
		t.Errorf("the killed owner %q recorded its own loss", leader)
	}
	if by["Fenced"].Severity != "WARNING" || by["NodeLost"].Severity != "WARNING" || by["Removed"].Details["proof"] != "fenced" ||
		by["Fenced"].Details["node"] != owner || by["Scheduled"].Details["why"] != "spec.node names it" {
		t.Errorf("details: Fenced %+v, NodeLost %+v, Removed %+v, Scheduled %+v", by["Fenced"], by["NodeLost"], by["Removed"], by["Scheduled"])
	}

	// The same, as a person reads it: a header, then a row per event.
	tbl := run(t, bin, both, "sandbox", "events", "victim").must(t, 0, "sandbox events")
	t.Logf("shoal sandbox events victim:\n%s", tbl.stdout)
	lines := strings.Split(strings.TrimSpace(tbl.stdout), "\n")
	if len(lines) != 1+len(evs) || !strings.HasPrefix(lines[0], "LAST SEEN") || !strings.Contains(lines[4], "NodeLost") || !strings.Contains(lines[7], "Removed") {
		t.Fatalf("sandbox events:\n%s", tbl.stdout)
	}

	// Cluster-wide, and by node: the owner's events are the ones about
	// its sandbox (and those it recorded); the watches saw them as they
	// were written.
	wide := listEvents(t, bin, both, "events", "--node", owner)
	if got := only(wide, want...); !slices.Equal(got, want) {
		t.Fatalf("events --node %s: %v", owner, reasons(wide))
	}
	testenv.Eventually(t, 20*time.Second, "the watches saw every event", func() (bool, error) {
		for _, w := range []*eventWatch{watch, ownerWatch} {
			got := only(w.seen(), want...)
			slices.Sort(got)
			sorted := slices.Clone(want)
			slices.Sort(sorted)
			if !slices.Equal(got, sorted) {
				return false, errors.New(strings.Join(reasons(w.seen()), ","))
			}
		}
		return true, nil
	})
	for _, ev := range watch.seen() {
		if ev.Sandbox != "victim" {
			t.Errorf("the cluster-wide watch saw an event of %q: %+v", ev.Sandbox, ev)
		}
	}
}

// The events commands' syntax through the binary: flags before and after
// the name, bad input as usage errors naming the flag or field (exit 2),
// a sandbox nobody knows as not found for describe (3) and as no events
// for events (0), and -o json of nothing as an empty list.
func TestEventsCommandsThroughBinary(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	bin := testenv.Binary(t)
	ep := n.Addr()
	run(t, bin, ep, "sandbox", "create", "one", "--wait").must(t, 0, "create")
	testenv.Eventually(t, 20*time.Second, "Started", func() bool {
		return slices.Contains(reasons(listEvents(t, bin, ep, "sandbox", "events", "one")), "Started")
	})
	for _, args := range [][]string{
		{"sandbox", "events", "--limit", "1", "one"},
		{"sandbox", "events", "one", "--limit", "1"},
		{"--workspace", "default", "sandbox", "events", "one", "--limit=1"},
	} {
		evs := listEvents(t, bin, ep, args...)
		if len(evs) != 1 || evs[0].Reason != "Started" {
			t.Errorf("%v: %v; want the newest, Started", args, reasons(evs))
		}
		r := run(t, bin, ep, args...).must(t, 0, strings.Join(args, " "))
		if !strings.Contains(r.stderr, "older events are not shown") {
			t.Errorf("%v: stderr does not say events were left out: %q", args, r.stderr)
		}
	}
	if evs := listEvents(t, bin, ep, "events"); !slices.Equal(only(evs, "Scheduled", "Started"), []string{"Scheduled", "Started"}) {
		t.Errorf("events: %v", reasons(evs))
	}
	if evs := listEvents(t, bin, ep, "events", "-w", "other"); len(evs) != 0 {
		t.Errorf("events -w other: %v; want none", reasons(evs))
	}
	r := run(t, bin, ep, "sandbox", "events", "nobody").must(t, 0, "events of a sandbox nobody knows")
	if r.stdout != "" || !strings.Contains(r.stderr, "no events of sandbox nobody") {
		t.Errorf("sandbox events nobody: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if r := run(t, bin, ep, "sandbox", "events", "nobody", "-o", "json").must(t, 0, "json of no events"); strings.TrimSpace(r.stdout) != "{\n  \"items\": []\n}" {
		t.Errorf("-o json of no events: %q", r.stdout)
	}
	run(t, bin, ep, "sandbox", "describe", "nobody").must(t, cli.ExitNotFound, "describe of a sandbox nobody knows")
	d := run(t, bin, ep, "sandbox", "describe", "--events", "0", "one").must(t, 0, "describe --events 0")
	if !strings.Contains(d.stdout, "Events:\n  <none>") {
		t.Errorf("describe --events 0:\n%s", d.stdout)
	}
	// A stop and a start: who asked, and what the owner did.
	run(t, bin, ep, "sandbox", "stop", "one", "--wait").must(t, 0, "stop")
	run(t, bin, ep, "sandbox", "start", "one", "--wait").must(t, 0, "start")
	var evs []event
	testenv.Eventually(t, 20*time.Second, "StopRequested, Stopped, StartRequested, Started", func() (bool, error) {
		evs = listEvents(t, bin, ep, "sandbox", "events", "one")
		got := only(evs, "StopRequested", "Stopped", "StartRequested", "Started")
		return slices.Equal(got, []string{"Started", "StopRequested", "Stopped", "StartRequested", "Started"}), errors.New(strings.Join(reasons(evs), ","))
	})
	for _, ev := range evs {
		switch ev.Reason {
		case "Stopped":
			if ev.Details["requested"] != "true" || ev.Details["exit_code"] == "" || ev.Reporter != "agent" {
				t.Errorf("Stopped of a requested stop: %+v", ev)
			}
		case "StopRequested", "StartRequested":
			if ev.Reporter != "api" || ev.Details["by"] == "" || ev.Details["run_generation"] == "" || ev.Reason == "StopRequested" && ev.Details["grace"] == "" {
				t.Errorf("%s: %+v", ev.Reason, ev)
			}
		}
	}

	for _, bad := range []struct {
		args []string
		say  string
	}{
		{[]string{"sandbox", "events"}, "NAME"},
		{[]string{"sandbox", "events", "a", "b"}, "NAME"},
		{[]string{"sandbox", "describe"}, "NAME"},
		{[]string{"sandbox", "events", "one", "--limit", "-1"}, "--limit"},
		{[]string{"sandbox", "events", "one", "--limit", "6000"}, "limit"},
		{[]string{"sandbox", "describe", "one", "--events", "-2"}, "--events"},
		{[]string{"events", "--node", "Not_A_Node"}, "node"},
		{[]string{"events", "extra"}, "no arguments"},
		{[]string{"sandbox", "events", "Bad_Name"}, "sandbox"},
	} {
		r := run(t, bin, ep, bad.args...).must(t, cli.ExitUsage, strings.Join(bad.args, " "))
		if !strings.Contains(r.stderr, bad.say) {
			t.Errorf("%v: the error does not name %s:\n%s", bad.args, bad.say, r.stderr)
		}
	}
}
