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
	ExitUsage        = 2 // bad flags or arguments (also unknown commands, missing arguments), INVALID_ARGUMENT, a request over the size limit
	ExitNotFound     = 3 // NOT_FOUND
	ExitPrecondition = 4 // FAILED_PRECONDITION, ALREADY_EXISTS, ABORTED
	ExitUnavailable  = 5 // UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED: retry later
	ExitDenied       = 6 // PERMISSION_DENIED: the certificate's role may not do this
)

// exitCodesHelp is the exit-code contract as --help states it; README.md
// says the same.
const exitCodesHelp = `Exit codes: 0 ok, 1 error (also a corrupt stored record), 2 invalid input or
usage (an unknown command, a missing argument or flag), 3 not found,
4 precondition failed / already exists, 5 unavailable, timed out, or a node's
cap on open streams reached (retry later), 6 permission denied (the client
certificate's role may not do this).
Commands given several names (sandbox delete, provider delete) try every
name and print one error line per failure; they exit with the failures'
code if all share one, 1 otherwise. 'sandbox exec' exits with the
command's own exit code.`

// exitError carries an exit code and a hint to the user.
type exitError struct {
	code int
	msg  string
	hint string
	// seeHelp: a usage error whose hint is the failing command's --help,
	// named when the error is classified (app.helpCmd).
	seeHelp bool
}

func (e *exitError) Error() string { return e.msg }

func usageError(format string, a ...any) error {
	return &exitError{code: ExitUsage, msg: fmt.Sprintf(format, a...), seeHelp: true}
}

// classify turns any error into an exit code, a message and a hint.
func (a *app) classify(err error) *exitError {
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.seeHelp && ee.hint == "" {
			ee.hint = fmt.Sprintf("`%s --help` shows the syntax", a.helpCmd)
		}
		return ee
	}
	if strings.HasPrefix(err.Error(), "Required flag") {
		return a.classify(usageError("%s", err.Error()))
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
		return &exitError{code: ExitUsage, msg: "invalid input: a text value (an argument, env, config or credential value) is not valid UTF-8; nothing was sent",
			hint: "encode binary data (base64, hex) before passing it"}
	}
	switch st.Code() {
	case codes.InvalidArgument:
		return &exitError{code: ExitUsage, msg: "invalid input: " + msg, hint: "fix the field named above and run the command again"}
	case codes.NotFound:
		hint := "list what exists with `shoal sandbox list` or `shoal provider list` (check --workspace)"
		switch a.kind {
		case "sandbox", "provider":
			hint = fmt.Sprintf("`shoal %s list` shows what exists (check --workspace)", a.kind)
		case "node":
			hint = "`shoal node list` shows the nodes"
		}
		return &exitError{code: ExitNotFound, msg: msg, hint: hint}
	case codes.AlreadyExists:
		return &exitError{code: ExitPrecondition, msg: msg, hint: "pick another name, or delete the existing object first"}
	case codes.FailedPrecondition, codes.Aborted:
		hint := "the current state forbids this (the message says why); change that, then retry"
		if a.kind != "" {
			hint = fmt.Sprintf("the %s's current state forbids this; `shoal %s get NAME` shows it", a.kind, a.kind)
		}
		return &exitError{code: ExitPrecondition, msg: msg, hint: hint}
	case codes.Unavailable:
		if owner := shoal.OwnerGone(err); owner != "" {
			// The node dialed answered; the sandbox's owner, which it
			// relayed to, is what went away.
			return &exitError{code: ExitUnavailable, msg: "unavailable: " + msg,
				hint: fmt.Sprintf("node %s runs the sandbox; `shoal node get %s` shows when it is Ready again. A command that was running there is ended when that node is back: run it again then", owner, owner)}
		}
		if shoal.IsNotApplied(err) {
			return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("shoal at %s refused: %s", a.endpoint, msg),
				hint: "list more nodes of the cluster in --endpoint (comma-separated): a call moves on to the next"}
		}
		if strings.HasPrefix(msg, "etcd: ") || strings.Contains(msg, "unhealthy cluster") {
			// The node answered: it is its etcd that did not.
			return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("shoal at %s cannot reach etcd: %s", a.endpoint, strings.TrimPrefix(msg, "etcd: ")),
				hint: "etcd may be electing a leader (retry in a few seconds) or have lost its quorum; `shoal cluster status` shows each member, and --endpoint takes other nodes"}
		}
		if h := a.tlsHint(msg); h != "" {
			return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("shoal at %s refused the connection: %s", a.endpoint, msg), hint: h}
		}
		return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("shoal at %s is unavailable: %s", a.endpoint, msg),
			hint: "is a node running there? Start one with `shoal node start`, or set --endpoint / SHOAL_ENDPOINT"}
	case codes.PermissionDenied:
		return &exitError{code: ExitDenied, msg: "permission denied: " + msg,
			hint: "use a certificate of a role that may (admin for providers and the cluster, operator for sandboxes); docs/security.md lists the methods by role"}
	case codes.DeadlineExceeded:
		return &exitError{code: ExitUnavailable, msg: "timed out: " + msg, hint: "raise --timeout, or check the node's health"}
	case codes.ResourceExhausted:
		// gRPC itself reports a message over the size limit with this
		// code; that is the caller's to fix, and retrying cannot help.
		if strings.Contains(msg, "message larger than max") {
			return &exitError{code: ExitUsage, msg: "request too large: " + msg, hint: "send less data in one request"}
		}
		return &exitError{code: ExitUnavailable, msg: "the node is at its limit: " + msg,
			hint: "a node caps its open streams (exec, logs --follow, watch); retry later, or end some of those sessions"}
	case codes.DataLoss:
		kind := a.kind
		if kind != "sandbox" && kind != "provider" {
			kind = "sandbox|provider"
		}
		return &exitError{code: ExitError, msg: "corrupt stored record: " + msg,
			hint: fmt.Sprintf("the record cannot be read, so it cannot be repaired; `shoal %s delete NAME` removes it, then create the object again", kind)}
	}
	return &exitError{code: ExitError, msg: fmt.Sprintf("%s: %s", st.Code(), msg), hint: ""}
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
