package apiserver_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
)

// drainExec reads an ExecInteractive call to its end: the output, the exit
// chunk if one came, and the call's final error (nil after the exit chunk
// and a clean end).
func drainExec(st shoalv1.Shoal_ExecInteractiveClient) (out string, exited bool, code int32, err error) {
	for {
		ch, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out, exited, code, nil
		}
		if err != nil {
			return out, exited, code, err
		}
		out += string(ch.Data)
		if ch.Exited {
			exited, code = true, ch.ExitCode
		}
	}
}

// ExecInteractive's protocol, against a real node: the first message must
// start the command, a second start, an empty message, close_stdin false
// and a uid of -1 are refused naming the field, stdin ends at a
// half-close, and a timeout holds even after the command closed its
// output (on Exec too).
func TestExecInteractiveProtocol(t *testing.T) {
	testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := ctxT(t, 3*time.Minute)
	readySandbox(t, ctx, n.Client, "ip")
	start := func(cmd ...string) *shoalv1.ExecInput {
		return &shoalv1.ExecInput{Input: &shoalv1.ExecInput_Start{Start: &shoalv1.ExecRequest{Name: "ip", Command: cmd}}}
	}

	// Stdin until the half-close: cat echoes it and exits 0.
	st, err := n.Client.ExecInteractive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*shoalv1.ExecInput{start("cat"), {Input: &shoalv1.ExecInput_Stdin{Stdin: []byte("one ")}}, {Input: &shoalv1.ExecInput_Stdin{Stdin: []byte("two")}}} {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if out, exited, code, err := drainExec(st); err != nil || !exited || code != 0 || out != "one two" {
		t.Fatalf("cat of a half-closed stdin: %q exited %v code %d err %v", out, exited, code, err)
	}

	for _, tc := range []struct {
		name  string
		msgs  []*shoalv1.ExecInput
		field string
	}{
		{"no start first", []*shoalv1.ExecInput{{Input: &shoalv1.ExecInput_Stdin{Stdin: []byte("x")}}}, "start"},
		{"start twice", []*shoalv1.ExecInput{start("cat"), start("cat")}, "start"},
		{"empty message", []*shoalv1.ExecInput{start("cat"), {}}, "input"},
		{"close_stdin false", []*shoalv1.ExecInput{start("cat"), {Input: &shoalv1.ExecInput_CloseStdin{CloseStdin: false}}}, "close_stdin"},
		{"bad user", []*shoalv1.ExecInput{{Input: &shoalv1.ExecInput_Start{Start: &shoalv1.ExecRequest{Name: "ip", Command: []string{"id"}, User: "4294967295"}}}}, "start.user"},
	} {
		st, err := n.Client.ExecInteractive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range tc.msgs {
			if st.Send(m) != nil {
				break // the server ended the call: Recv says why
			}
		}
		_, _, _, err = drainExec(st)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("%s: %v; want INVALID_ARGUMENT naming %s", tc.name, err, tc.field)
		}
	}

	// The command closes its output and runs on: the timeout still ends
	// it, with 124, whether the engine ends the output stream then (the
	// runtime's inspect loop holds the deadline) or only at the exit.
	for _, interactive := range []bool{false, true} {
		req := &shoalv1.ExecRequest{Name: "ip", Command: []string{"sh", "-c", "exec >/dev/null 2>&1; sleep 4848"}, Timeout: durationpb.New(time.Second)}
		began := time.Now()
		var exited bool
		var code int32
		if interactive {
			st, err := n.Client.ExecInteractive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(&shoalv1.ExecInput{Input: &shoalv1.ExecInput_Start{Start: req}}); err != nil {
				t.Fatal(err)
			}
			_, exited, code, err = drainExec(st)
			if err != nil {
				t.Fatal(err)
			}
		} else {
			r, err := execAll(ctx, n.Client, "ip", "true") // warm: the same path as below, without options
			if err != nil || r.code != 0 {
				t.Fatalf("exec true: %v %d", err, r.code)
			}
			st, err := n.Client.Exec(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			for {
				ch, err := st.Recv()
				if err != nil {
					t.Fatalf("exec with a timeout: %v", err)
				}
				if ch.Exited {
					exited, code = true, ch.ExitCode
					break
				}
			}
		}
		if !exited || code != 124 {
			t.Fatalf("interactive %v: a command that closed its output, past its 1 s timeout: exited %v code %d", interactive, exited, code)
		}
		if d := time.Since(began); d > 30*time.Second {
			t.Fatalf("interactive %v: the timeout of 1 s ended the command after %s", interactive, d)
		}
		if ps := processes(t, ctx, n.Client, "ip"); strings.Contains(ps, "sleep 4848") {
			t.Fatalf("interactive %v: the timed-out command runs on:\n%s", interactive, ps)
		}
	}
}
