package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/proto"

	shoalv1 "shoal/api/shoal/v1"
)

// Events: `shoal events` (cluster-wide) and `shoal sandbox events NAME`,
// newest last, as `kubectl events` prints them; with --watch, the new ones
// as they are written.

const eventsHelp = `Events are what the nodes did to sandboxes and saw them do: Scheduled,
Created, Started, Stopped, Paused, Frozen, NodeLost, Fenced, DeleteRequested,
TornDown, Removed, and failures in the engine's own words. Each says which
node recorded it and which part of that node acted (api, agent, leader).
An unbroken run of repeats within 10 minutes is one event with a count. Events are kept for an
hour (the recording node's --event-ttl), so a deleted sandbox's history can
still be read for a while after it is gone.

With --watch the list is followed by new events as they are written (and by
repeats of listed ones, with their count), until interrupted.`

func eventFlags(limitUsage string) []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "watch", Usage: "after the list, stream new events until interrupted"},
		&cli.IntFlag{Name: "limit", Usage: limitUsage},
	}
}

func (a *app) eventsCmd() *cli.Command {
	return &cli.Command{
		Name:  "events",
		Usage: "list the events of every sandbox, newest last",
		Description: eventsHelp + `

Every workspace is listed unless --workspace (or SHOAL_WORKSPACE) names one.

  shoal events
  shoal events --node n2 --watch
  shoal events -o json --limit 50`,
		Flags: append(eventFlags("only the newest `N` events (default 500, at most 5000)"),
			&cli.StringFlag{Name: "node", Usage: "only events of sandboxes on node `NAME`, or recorded by it"}),
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, 0, ""); err != nil {
				return err
			}
			workspace := ""
			if c.IsSet("workspace") {
				workspace = a.workspace
			}
			return a.events(c, &shoalv1.ListEventsRequest{Workspace: workspace, Node: c.String("node")}, true)
		},
	}
}

func (a *app) sandboxEvents() *cli.Command {
	return &cli.Command{
		Name:      "events",
		Usage:     "list a sandbox's events, newest last",
		ArgsUsage: "NAME",
		Description: eventsHelp + `

Every incarnation of the name is listed: a sandbox deleted and created again
under it shows both histories (sandbox_uid, in -o json|yaml, tells them apart).

  shoal sandbox events agent
  shoal sandbox events agent --watch`,
		Flags: eventFlags("only the newest `N` events (default 500, at most 5000)"),
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, 1, "NAME"); err != nil {
				return err
			}
			return a.events(c, &shoalv1.ListEventsRequest{Workspace: a.workspace, Sandbox: c.Args().First()}, false)
		},
	}
}

// events lists what req selects and, with --watch, follows it.
func (a *app) events(c *cli.Context, req *shoalv1.ListEventsRequest, wide bool) error {
	if c.Int("limit") < 0 {
		return usageError("--limit: %d is negative", c.Int("limit"))
	}
	req.Limit = int32(c.Int("limit"))
	return a.showEvents(c.Context, eventView{req: req, wide: wide, watch: c.Bool("watch"), none: noEvents(req)})
}

// egressReasons are the reasons of egress events (events/reason.go).
var egressReasons = []string{"EgressApplied", "EgressRefused", "EgressAudited"}

// egressEvents is `sandbox logs NAME --egress`: the sandbox's egress
// events, the newest --tail of them, and with --follow the new ones. The
// API selects events by object, not by reason, so they are picked here
// from the newest the server keeps of the sandbox (at most 5000).
func (a *app) egressEvents(c *cli.Context) error {
	if err := exactArgs(c, 1, "NAME"); err != nil {
		return err
	}
	if c.Int("tail") < 0 {
		return usageError("--tail: %d is negative", c.Int("tail"))
	}
	name := c.Args().First()
	return a.showEvents(c.Context, eventView{
		req:   &shoalv1.ListEventsRequest{Workspace: a.workspace, Sandbox: name, Limit: maxEventsLimit},
		watch: c.Bool("follow"),
		keep:  func(ev *shoalv1.Event) bool { return slices.Contains(egressReasons, ev.GetReason()) },
		last:  c.Int("tail"),
		what:  "egress events",
		none:  fmt.Sprintf("no egress events of sandbox %s (events are kept for an hour; refused and audited connections are sampled)", name),
	})
}

// maxEventsLimit is the most events one ListEvents returns.
const maxEventsLimit = 5000

// eventView is what an events listing shows.
type eventView struct {
	req   *shoalv1.ListEventsRequest
	wide  bool // events of many sandboxes: a SANDBOX column
	watch bool // then follow new events
	// keep, when set, picks the events to show of those req selects;
	// then only the last of them (0: all), what names them in the
	// warnings ("egress events").
	keep func(*shoalv1.Event) bool
	last int
	what string
	none string // what to say when there is nothing to show
}

// showEvents lists what v selects and, with v.watch, follows it.
func (a *app) showEvents(ctx context.Context, v eventView) error {
	req := v.req
	api, err := a.api()
	if err != nil {
		return err
	}
	resp, err := api.ListEvents(ctx, req)
	if err != nil {
		return err
	}
	items := resp.Items
	var warnings []string
	if v.keep == nil {
		if n := resp.GetOmitted(); n > 0 {
			warnings = append(warnings, fmt.Sprintf("%d older events are not shown (--limit)", n))
		}
	} else {
		items = slices.DeleteFunc(slices.Clone(items), func(ev *shoalv1.Event) bool { return !v.keep(ev) })
		if resp.GetOmitted() > 0 {
			warnings = append(warnings, fmt.Sprintf("%s older than the newest %d events of the sandbox are not searched", v.what, len(resp.Items)))
		}
		if v.last > 0 && len(items) > v.last {
			warnings = append(warnings, fmt.Sprintf("%d older %s are not shown (--tail)", len(items)-v.last, v.what))
			items = items[len(items)-v.last:]
		}
	}
	a.out.warnings(warnings)
	ep := eventPrinter{p: a.out, wide: v.wide}
	switch {
	case a.out.format != formatTable && !v.watch:
		msgs := make([]proto.Message, len(items))
		for i, ev := range items {
			msgs[i] = ev
		}
		return a.out.objects(itemList, nil, nil, msgs...)
	case a.out.format == formatTable && len(items) == 0 && !v.watch:
		fmt.Fprintln(a.stderr, v.none)
		return nil
	}
	// A watch prints as it goes: the header (tables), then each event,
	// bare in JSON and YAML, one object after another.
	if err := ep.header(); err != nil {
		return err
	}
	for _, ev := range items {
		if err := ep.event(ev); err != nil {
			return err
		}
	}
	if !v.watch {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := api.WatchEvents(ctx, &shoalv1.WatchEventsRequest{Workspace: req.Workspace, Sandbox: req.Sandbox,
		SandboxUid: req.SandboxUid, Node: req.Node, ResourceVersion: resp.GetResourceVersion()})
	if err != nil {
		return err
	}
	return recvAll(ctx, stream.Recv, func(ev *shoalv1.Event) error {
		if v.keep != nil && !v.keep(ev) {
			return nil
		}
		return ep.event(ev)
	})
}

func noEvents(req *shoalv1.ListEventsRequest) string {
	switch {
	case req.Sandbox != "":
		return fmt.Sprintf("no events of sandbox %s (events are kept for an hour)", req.Sandbox)
	case req.Node != "":
		return fmt.Sprintf("no events of node %s (events are kept for an hour)", req.Node)
	}
	return "no events (events are kept for an hour)"
}

// eventPrinter prints events one at a time: as table rows of fixed
// columns (a watch cannot align what it has not seen yet), or as bare
// JSON or YAML objects.
type eventPrinter struct {
	p    printer
	wide bool // a SANDBOX column: the events are of many sandboxes
}

func (e eventPrinter) header() error {
	if e.p.format != formatTable {
		return nil
	}
	return e.row("LAST SEEN", "TYPE", "REASON", "SANDBOX", "FROM", "MESSAGE")
}

func (e eventPrinter) event(ev *shoalv1.Event) error {
	if e.p.format != formatTable {
		return e.p.object(ev)
	}
	sandbox := ev.GetSandbox()
	if ev.GetWorkspace() != "default" {
		sandbox = ev.GetWorkspace() + "/" + sandbox
	}
	return e.row(e.p.lastSeen(ev), severityName(ev.GetSeverity()), ev.GetReason(), sandbox, eventSource(ev), oneLine(ev.GetMessage()))
}

func (e eventPrinter) row(seen, typ, reason, sandbox, from, msg string) error {
	var err error
	if e.wide {
		_, err = fmt.Fprintf(e.p.w, "%-18s %-8s %-16s %-24s %-18s %s\n", seen, typ, reason, sandbox, from, msg)
	} else {
		_, err = fmt.Fprintf(e.p.w, "%-18s %-8s %-16s %-18s %s\n", seen, typ, reason, from, msg)
	}
	return err
}

// lastSeen is an event's age, and for a coalesced one how often and over
// how long: "5s (x3 over 2m)", as kubectl shows it.
func (p printer) lastSeen(ev *shoalv1.Event) string {
	age := p.age(ev.GetLastTime())
	if ev.GetCount() <= 1 {
		return age
	}
	over := ev.GetLastTime().AsTime().Sub(ev.GetFirstTime().AsTime())
	return fmt.Sprintf("%s (x%d over %s)", age, ev.GetCount(), shortDuration(over))
}

func shortDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	}
	return fmt.Sprintf("%dh", int(d.Hours()))
}

// severityName is Normal or Warning, as kubectl prints an event's type.
func severityName(s shoalv1.EventSeverity) string {
	if s == shoalv1.EventSeverity_WARNING {
		return "Warning"
	}
	return "Normal"
}

// eventSource is who recorded an event: "leader n1", "agent n2".
func eventSource(ev *shoalv1.Event) string {
	if ev.GetReporter() == "" {
		return ev.GetReportingNode()
	}
	return ev.GetReporter() + " " + ev.GetReportingNode()
}

// oneLine keeps a message on its row.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
