package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"shoal"
)

// Exit codes. Scripts may rely on them.
const (
	ExitOK           = 0
	ExitError        = 1 // anything not listed below, DATA_LOSS, and mixed failures of a multi-name command
	ExitUsage        = 2 // bad flags or arguments, INVALID_ARGUMENT, a request over the size limit
	ExitNotFound     = 3 // NOT_FOUND
	ExitPrecondition = 4 // FAILED_PRECONDITION, ALREADY_EXISTS, ABORTED
	ExitUnavailable  = 5 // UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED: retry later
	ExitDenied       = 6 // PERMISSION_DENIED: the certificate's role may not do this
)

// exitCodesHelp is the exit-code contract as --help states it; README.md
// says the same.
const exitCodesHelp = `Exit codes: 0 ok, 1 error (also a corrupt stored record), 2 invalid input or
usage, 3 not found, 4 precondition failed / already exists, 5 unavailable,
timed out, or a node's cap on open streams reached (retry later), 6 permission
denied (the client certificate's role may not do this).
Commands given several names (sandbox delete, provider delete) try every
name and print one error line per failure; they exit with the failures'
code if all share one, 1 otherwise. 'sandbox exec' exits with the
command's own exit code.`

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
	if st.Code() == codes.Internal && strings.Contains(msg, "invalid UTF-8") {
		// Refused by this client's own encoder: nothing was sent.
		return &exitError{ExitUsage, "invalid input: a text value (an argument, env, config or credential value) is not valid UTF-8; nothing was sent",
			"encode binary data (base64, hex) before passing it"}
	}
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
		if owner := shoal.OwnerGone(err); owner != "" {
			// The node dialed answered; the sandbox's owner, which it
			// relayed to, is what went away.
			return &exitError{ExitUnavailable, "unavailable: " + msg,
				fmt.Sprintf("node %s runs the sandbox; `shoal node get %s` shows when it is Ready again. A command that was running there is ended when that node is back: run it again then", owner, owner)}
		}
		if shoal.IsNotApplied(err) {
			return &exitError{ExitUnavailable, fmt.Sprintf("shoal at %s refused: %s", a.endpoint, msg),
				"list more nodes of the cluster in --endpoint (comma-separated): a call moves on to the next"}
		}
		if strings.HasPrefix(msg, "etcd: ") || strings.Contains(msg, "unhealthy cluster") {
			// The node answered: it is its etcd that did not.
			return &exitError{ExitUnavailable, fmt.Sprintf("shoal at %s cannot reach etcd: %s", a.endpoint, strings.TrimPrefix(msg, "etcd: ")),
				"etcd may be electing a leader (retry in a few seconds) or have lost its quorum; `shoal cluster status` shows each member, and --endpoint takes other nodes"}
		}
		if h := a.tlsHint(msg); h != "" {
			return &exitError{ExitUnavailable, fmt.Sprintf("shoal at %s refused the connection: %s", a.endpoint, msg), h}
		}
		return &exitError{ExitUnavailable, fmt.Sprintf("shoal at %s is unavailable: %s", a.endpoint, msg),
			"is a node running there? Start one with `shoal node start`, or set --endpoint / SHOAL_ENDPOINT"}
	case codes.PermissionDenied:
		return &exitError{ExitDenied, "permission denied: " + msg,
			"use a certificate of a role that may (admin for providers and the cluster, operator for sandboxes); docs/security.md lists the methods by role"}
	case codes.DeadlineExceeded:
		return &exitError{ExitUnavailable, "timed out: " + msg, "raise --timeout, or check the node's health"}
	case codes.ResourceExhausted:
		// gRPC itself reports a message over the size limit with this
		// code; that is the caller's to fix, and retrying cannot help.
		if strings.Contains(msg, "message larger than max") {
			return &exitError{ExitUsage, "request too large: " + msg, "send less data in one request"}
		}
		return &exitError{ExitUnavailable, "the node is at its limit: " + msg,
			"a node caps its open streams (exec, logs --follow, watch); retry later, or end some of those sessions"}
	case codes.DataLoss:
		kind := a.kind
		if kind == "" {
			kind = "sandbox|provider"
		}
		return &exitError{ExitError, "corrupt stored record: " + msg,
			fmt.Sprintf("the record cannot be read, so it cannot be repaired; `shoal %s delete NAME` removes it, then create the object again", kind)}
	}
	return &exitError{ExitError, fmt.Sprintf("%s: %s", st.Code(), msg), ""}
}

// tlsHint says what to do about a connection that failed on TLS: the
// messages are gRPC's and crypto/tls's, as a client sees them.
func (a *app) tlsHint(msg string) string {
	switch {
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "the node serves plaintext: leave out --tls-cert/--tls-key/--tls-ca (and SHOAL_TLS_*), or use a context without them"
	case strings.Contains(msg, "remote error: tls:"):
		return "the node refused this client's certificate: it is not signed by the cluster's CA (or has expired); use one from the cluster's `shoal certs init` directory"
	case strings.Contains(msg, "x509:"):
		return "the node's certificate does not verify: --tls-ca is not the cluster's CA, or the node's certificate is not valid for the address dialed (`shoal certs init --hosts` adds names)"
	case !a.tls.Set() && strings.Contains(msg, "server preface"):
		return "the node may require mutual TLS: give --tls-cert, --tls-key and --tls-ca (or a context that has them: `shoal config --help`)"
	}
	return ""
}
