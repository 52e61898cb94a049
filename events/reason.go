package events

import (
	"time"

	shoalv1 "shoal/api/shoal/v1"
)

// Reason says what happened, in one CamelCase word (doc.go has who
// records each).
type Reason string

// Reasons. Each is recorded by one part of a node (reporter): its API
// server, its agent, or the leader's loops.
const (
	Scheduled       Reason = "Scheduled"
	DeleteRequested Reason = "DeleteRequested"
	// StopRequested and StartRequested: a stop or a start of the
	// sandbox's container was asked for.
	StopRequested  Reason = "StopRequested"
	StartRequested Reason = "StartRequested"

	Created        Reason = "Created"
	Started        Reason = "Started"
	Stopped        Reason = "Stopped"
	Paused         Reason = "Paused"
	Unpaused       Reason = "Unpaused"
	Frozen         Reason = "Frozen"
	Thawed         Reason = "Thawed"
	NodeReady      Reason = "NodeReady"
	TornDown       Reason = "TornDown"
	Failed         Reason = "Failed"
	FailedTeardown Reason = "FailedTeardown"
	// EngineUnavailable and EngineAvailable: the node's container engine
	// stopped answering for longer than its --engine-grace, and answers
	// again.
	EngineUnavailable Reason = "EngineUnavailable"
	EngineAvailable   Reason = "EngineAvailable"

	// EgressApplied: the owning node enforces a new version of the
	// sandbox's egress policy. EgressRefused: the node's proxy refused a
	// connection of the sandbox (host, port and reason in the message).
	// EgressAudited: in audit mode, a connection enforce would have
	// refused was admitted. Refused and audited decisions are sampled
	// (the message says how many were left out).
	EgressApplied Reason = "EgressApplied"
	EgressRefused Reason = "EgressRefused"
	EgressAudited Reason = "EgressAudited"

	NodeLost Reason = "NodeLost"
	Fenced   Reason = "Fenced"
	Removed  Reason = "Removed"
)

// Reporters: the part of a node that records an event.
const (
	ReporterAPI    = "api"
	ReporterAgent  = "agent"
	ReporterLeader = "leader"
)

type reasonInfo struct {
	reporter string
	warning  bool
}

var reasons = map[Reason]reasonInfo{
	Scheduled:         {ReporterAPI, false},
	DeleteRequested:   {ReporterAPI, false},
	StopRequested:     {ReporterAPI, false},
	StartRequested:    {ReporterAPI, false},
	Created:           {ReporterAgent, false},
	Started:           {ReporterAgent, false},
	Stopped:           {ReporterAgent, false},
	Paused:            {ReporterAgent, true},
	Unpaused:          {ReporterAgent, false},
	Frozen:            {ReporterAgent, true},
	Thawed:            {ReporterAgent, false},
	NodeReady:         {ReporterAgent, false},
	TornDown:          {ReporterAgent, false},
	Failed:            {ReporterAgent, true},
	FailedTeardown:    {ReporterAgent, true},
	EngineUnavailable: {ReporterAgent, true},
	EngineAvailable:   {ReporterAgent, false},
	EgressApplied:     {ReporterAgent, false},
	EgressRefused:     {ReporterAgent, true},
	EgressAudited:     {ReporterAgent, true},
	NodeLost:          {ReporterLeader, true},
	Fenced:            {ReporterLeader, true},
	Removed:           {ReporterLeader, false},
}

// Event is what a caller records about a sandbox.
type Event struct {
	Reason Reason
	// Message says what happened, for a person (at most MaxMessageBytes
	// are kept). Never a credential: the engine's words reach it only
	// after the runtime scrubbed them.
	Message string
	// Details say it for a script (at most MaxDetails, each cut to
	// MaxDetailBytes).
	Details map[string]string
	// At is when it happened; zero: when Record is called.
	At time.Time
	// Warning makes it a Warning whatever its reason's severity (a
	// command that ended with an error nobody asked for).
	Warning bool
	// Once: any node may record this fact, and it is kept once. Its id
	// derives from the sandbox uid, the reason and At (which must be set,
	// and the same wherever it is recorded); it is written only if absent,
	// and never coalesced or rate limited.
	Once bool
}

// Bounds of what one event holds.
const (
	MaxMessageBytes = 1024
	MaxDetails      = 16
	MaxDetailBytes  = 256
)

// severity of an event of reason r.
func severity(r Reason, warning bool) shoalv1.EventSeverity {
	if warning || reasons[r].warning {
		return shoalv1.EventSeverity_WARNING
	}
	return shoalv1.EventSeverity_NORMAL
}
