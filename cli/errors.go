package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Exit codes. Scripts may rely on them.
const (
	ExitOK           = 0
	ExitError        = 1 // anything not listed below
	ExitUsage        = 2 // bad flags or arguments, or INVALID_ARGUMENT
	ExitNotFound     = 3 // NOT_FOUND
	ExitPrecondition = 4 // FAILED_PRECONDITION, ALREADY_EXISTS, ABORTED
	ExitUnavailable  = 5 // UNAVAILABLE, DEADLINE_EXCEEDED: retry later
)

// exitError carries an exit code and a hint to the user.
type exitError struct {
	code int
	msg  string
	hint string
}

func (e *exitError) Error() string { return e.msg }

func usageError(format string, a ...any) error {
	return &exitError{code: ExitUsage, msg: fmt.Sprintf(format, a...), hint: "see --help for the syntax"}
}

// classify turns any error into an exit code, a message and a hint.
func (a *app) classify(err error) *exitError {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee
	}
	if strings.HasPrefix(err.Error(), "Required flag") {
		return &exitError{code: ExitUsage, msg: err.Error(), hint: "see --help for the syntax"}
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return &exitError{code: ec.ExitCode(), msg: err.Error()}
	}
	st, ok := status.FromError(err)
	if !ok {
		return &exitError{code: ExitError, msg: err.Error()}
	}
	msg := st.Message()
	switch st.Code() {
	case codes.InvalidArgument:
		return &exitError{ExitUsage, "invalid input: " + msg, "fix the field named above and run the command again"}
	case codes.NotFound:
		return &exitError{ExitNotFound, msg, "list what exists with `shoal sandbox list` or `shoal provider list` (check --workspace)"}
	case codes.AlreadyExists:
		return &exitError{ExitPrecondition, msg, "pick another name, or delete the existing object first"}
	case codes.FailedPrecondition, codes.Aborted:
		return &exitError{ExitPrecondition, msg, "the object's current state forbids this; `get` it to see that state, then retry"}
	case codes.Unavailable:
		return &exitError{ExitUnavailable, fmt.Sprintf("shoal at %s is unavailable: %s", a.endpoint, msg),
			"is a node running there? Start one with `shoal node start`, or set --endpoint / SHOAL_ENDPOINT"}
	case codes.DeadlineExceeded:
		return &exitError{ExitUnavailable, "timed out: " + msg, "raise --timeout, or check the node's health"}
	case codes.ResourceExhausted:
		return &exitError{ExitUsage, "request too large: " + msg, "send less data in one request"}
	}
	return &exitError{ExitError, fmt.Sprintf("%s: %s", st.Code(), msg), ""}
}
