package shoal

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Kind classifies an error the way a client must react to it.
type Kind int

const (
	KindUnknown            Kind = iota
	KindNotFound                // the object does not exist
	KindAlreadyExists           // create of a name that is taken
	KindConflict                // a caller-supplied resource_version no longer matches
	KindFailedPrecondition      // the object's state forbids the request
	KindInvalid                 // the request itself is malformed
	KindUnavailable             // try again later (no leader, no Docker, ...)
	KindGone                    // a watch asked for a revision out of range: compacted, or never reached
	KindResourceExhausted       // a per-node cap (open streams) is reached; retry later
	KindDataLoss                // a stored record does not decode; delete it by name
	KindPermissionDenied        // the caller's role may not make this call
)

// Sentinels for errors.Is. Every *Error matches the sentinel of its Kind.
var (
	ErrNotFound           = &Error{Kind: KindNotFound, Msg: "not found"}
	ErrAlreadyExists      = &Error{Kind: KindAlreadyExists, Msg: "already exists"}
	ErrConflict           = &Error{Kind: KindConflict, Msg: "conflict"}
	ErrFailedPrecondition = &Error{Kind: KindFailedPrecondition, Msg: "failed precondition"}
	ErrInvalid            = &Error{Kind: KindInvalid, Msg: "invalid"}
	ErrUnavailable        = &Error{Kind: KindUnavailable, Msg: "unavailable"}
	ErrGone               = &Error{Kind: KindGone, Msg: "gone"}
	ErrResourceExhausted  = &Error{Kind: KindResourceExhausted, Msg: "resource exhausted"}
	ErrDataLoss           = &Error{Kind: KindDataLoss, Msg: "data loss"}
	ErrPermissionDenied   = &Error{Kind: KindPermissionDenied, Msg: "permission denied"}
)

// Error is a typed error. Field names the offending request field for
// KindInvalid errors.
type Error struct {
	Kind  Kind
	Field string
	Msg   string
	// NotApplied: the server did nothing with the request, so a client
	// may send the same request to another node (errors.go: ReasonNotApplied).
	NotApplied bool
	// OwnerGone, on a KindUnavailable error, names the node that went away
	// in the middle of a call this node relayed to it (ReasonOwnerGone).
	OwnerGone string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return e.Field + ": " + e.Msg
	}
	return e.Msg
}

// Is makes errors.Is(err, ErrNotFound) true for every not-found *Error.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind && (t.Msg == e.Msg || isSentinel(t))
}

func isSentinel(e *Error) bool {
	switch e {
	case ErrNotFound, ErrAlreadyExists, ErrConflict, ErrFailedPrecondition, ErrInvalid, ErrUnavailable, ErrGone,
		ErrResourceExhausted, ErrDataLoss, ErrPermissionDenied:
		return true
	}
	return false
}

func NotFound(format string, a ...any) error {
	return &Error{Kind: KindNotFound, Msg: fmt.Sprintf(format, a...)}
}

func AlreadyExists(format string, a ...any) error {
	return &Error{Kind: KindAlreadyExists, Msg: fmt.Sprintf(format, a...)}
}

func Conflict(format string, a ...any) error {
	return &Error{Kind: KindConflict, Msg: fmt.Sprintf(format, a...)}
}

func FailedPrecondition(format string, a ...any) error {
	return &Error{Kind: KindFailedPrecondition, Msg: fmt.Sprintf(format, a...)}
}

func Unavailable(format string, a ...any) error {
	return &Error{Kind: KindUnavailable, Msg: fmt.Sprintf(format, a...)}
}

func Gone(format string, a ...any) error {
	return &Error{Kind: KindGone, Msg: fmt.Sprintf(format, a...)}
}

func ResourceExhausted(format string, a ...any) error {
	return &Error{Kind: KindResourceExhausted, Msg: fmt.Sprintf(format, a...)}
}

func PermissionDenied(format string, a ...any) error {
	return &Error{Kind: KindPermissionDenied, Msg: fmt.Sprintf(format, a...)}
}

func DataLoss(format string, a ...any) error {
	return &Error{Kind: KindDataLoss, Msg: fmt.Sprintf(format, a...)}
}

// Invalid reports a malformed request field. field is the request path,
// for example "sandbox.spec.env[FOO]".
func Invalid(field, format string, a ...any) error {
	return &Error{Kind: KindInvalid, Field: field, Msg: fmt.Sprintf(format, a...)}
}

// NotApplied marks a typed error as "nothing was done": the request may
// be sent again, to another node, whatever it was. Untyped errors are
// returned as they are.
func NotApplied(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	c := *e
	c.NotApplied = true
	return &c
}

// ReasonNotApplied is the google.rpc.ErrorInfo reason (domain
// ErrorDomain) of a gRPC status whose request the server did not apply.
const (
	ReasonNotApplied = "NOT_APPLIED"
	ErrorDomain      = "shoal.dev"
)

// ReasonOwnerGone is the google.rpc.ErrorInfo reason (domain ErrorDomain)
// of a gRPC status of a stream that a node relayed from a sandbox's owner
// when the owner went away mid-stream; its metadata's "node" names the
// owner.
const ReasonOwnerGone = "OWNER_GONE"

// OwnerGone returns the owner named by a gRPC error of ReasonOwnerGone,
// or "".
func OwnerGone(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Reason == ReasonOwnerGone && info.Domain == ErrorDomain {
			return info.Metadata["node"]
		}
	}
	return ""
}

// IsNotApplied reports whether a gRPC error says the server did nothing
// with the request.
func IsNotApplied(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Reason == ReasonNotApplied && info.Domain == ErrorDomain {
			return true
		}
	}
	return false
}

// KindOf returns the Kind of err, KindUnknown for untyped errors.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindUnknown
}

// GRPCStatus converts any error into a gRPC status error. It is the only
// place where shoal errors meet gRPC codes.
func GRPCStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var code codes.Code
	switch KindOf(err) {
	case KindNotFound:
		code = codes.NotFound
	case KindAlreadyExists:
		code = codes.AlreadyExists
	case KindConflict:
		// A caller precondition that no longer holds; retrying the same
		// request cannot succeed, so this is not ABORTED.
		code = codes.FailedPrecondition
	case KindFailedPrecondition:
		code = codes.FailedPrecondition
	case KindInvalid:
		code = codes.InvalidArgument
	case KindUnavailable:
		code = codes.Unavailable
	case KindGone:
		code = codes.OutOfRange
	case KindResourceExhausted:
		code = codes.ResourceExhausted
	case KindDataLoss:
		code = codes.DataLoss
	case KindPermissionDenied:
		code = codes.PermissionDenied
	default:
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			code = codes.DeadlineExceeded
		case errors.Is(err, context.Canceled):
			code = codes.Canceled
		default:
			code = codes.Internal
		}
	}
	st := status.New(code, err.Error())
	var e *Error
	if errors.As(err, &e) && e.NotApplied {
		if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonNotApplied, Domain: ErrorDomain}); derr == nil {
			st = d
		}
	}
	if e != nil && e.OwnerGone != "" {
		if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonOwnerGone, Domain: ErrorDomain, Metadata: map[string]string{"node": e.OwnerGone}}); derr == nil {
			st = d
		}
	}
	return st.Err()
}
