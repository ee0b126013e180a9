// Command autonomic-effect is the worker's only way to reach the world: it
// sends one request of the worker protocol to the broker socket bound into
// its domain and prints the answer as JSON. It holds no authority, names no
// host path, URL or credential, and is built static (CGO_ENABLED=0).
//
//	autonomic-effect prepare  -epoch N -lease ID -kind K -target-id T -target '{…}' [-payload FILE|-]
//	autonomic-effect evaluate -epoch N -effect ID -revision R [-approval FILE]
//	autonomic-effect commit   -epoch N -effect ID -revision R
//	autonomic-effect abort    -epoch N -effect ID -revision R
//	autonomic-effect status   -epoch N -effect ID
//	autonomic-effect fetch    -epoch N -effect ID [-offset O] [-limit L]
//
// -epoch and -lease default to $AUTONOMIC_EPOCH and $AUTONOMIC_LEASE_ID.
// Exit status (protocol/README.md §11.9): 0 ok, 1 no valid answer, 2 refused
// request, 3 stale authority, 4 retryable, 5 commit_unknown, 6 effect failed.
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/autonomic-kernel/autonomic/broker/client"
	"github.com/autonomic-kernel/autonomic/protocol"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

var actions = map[string]string{
	"prepare": protocol.WorkerPrepare, "evaluate": protocol.WorkerEvaluate, "commit": protocol.WorkerCommit,
	"abort": protocol.WorkerAbort, "status": protocol.WorkerStatus, "fetch": protocol.WorkerFetchResponse,
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || actions[args[0]] == "" {
		fmt.Fprintln(stderr, "usage: autonomic-effect prepare|evaluate|commit|abort|status|fetch [flags]")
		return 2
	}
	action := actions[args[0]]
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	envEpoch, _ := strconv.ParseInt(os.Getenv("AUTONOMIC_EPOCH"), 10, 64)
	// Inside a domain the socket is at client.DefaultSocket; an unsafe_local
	// worker (no mount namespace) is told where it is.
	defSocket := client.DefaultSocket
	if p := os.Getenv("AUTONOMIC_BROKER_SOCKET"); p != "" {
		defSocket = p
	}
	socket := fs.String("socket", defSocket, "broker socket")
	epoch := fs.Int64("epoch", envEpoch, "epoch the worker believes current")
	lease := fs.String("lease", os.Getenv("AUTONOMIC_LEASE_ID"), "lease id (prepare)")
	kind := fs.String("kind", "", "effect kind (prepare)")
	targetID := fs.String("target-id", "", "configured target id (prepare)")
	target := fs.String("target", "{}", "target-relative request, a JSON object (prepare)")
	payload := fs.String("payload", "", "payload file, or - for standard input (prepare)")
	effect := fs.String("effect", "", "effect id")
	revision := fs.Int("revision", 0, "effect revision")
	approval := fs.String("approval", "", "signed approval JSON file (evaluate)")
	offset := fs.Int64("offset", 0, "offset (fetch)")
	limit := fs.Int("limit", 0, "limit (fetch)")
	timeout := fs.Duration("timeout", 2*time.Minute, "deadline for the answer")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	var rid [8]byte
	_, _ = rand.Read(rid[:])
	req := &protocol.WorkerRequest{Protocol: protocol.WorkerVersion, RequestID: "c-" + hex.EncodeToString(rid[:]),
		Epoch: *epoch, Action: action, EffectID: *effect, Revision: *revision, Offset: *offset, Limit: *limit}
	if action == protocol.WorkerPrepare {
		req.LeaseID, req.Kind, req.TargetID, req.Target = *lease, *kind, *targetID, json.RawMessage(*target)
		if *payload != "" {
			var r io.Reader = stdin
			if *payload != "-" {
				f, err := os.Open(*payload)
				if err != nil {
					fmt.Fprintln(stderr, "autonomic-effect:", err)
					return 2
				}
				defer f.Close()
				r = f
			}
			b, err := io.ReadAll(io.LimitReader(r, protocol.MaxWorkerPayload+1))
			if err != nil {
				fmt.Fprintln(stderr, "autonomic-effect:", err)
				return 2
			}
			req.PayloadB64 = base64.StdEncoding.EncodeToString(b)
		}
	}
	if *approval != "" {
		b, err := os.ReadFile(*approval)
		if err != nil {
			fmt.Fprintln(stderr, "autonomic-effect:", err)
			return 2
		}
		req.Approval = &protocol.Approval{}
		if err := protocol.DecodeStrict(b, req.Approval); err != nil {
			fmt.Fprintln(stderr, "autonomic-effect: approval:", err)
			return 2
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	resp, err := client.Call(ctx, *socket, req)
	if err != nil {
		fmt.Fprintln(stderr, "autonomic-effect:", err)
		if pe := protocol.AsWire(err); pe.Code != protocol.CodeInternal {
			return exitCode(pe)
		}
		return 1
	}
	out, _ := json.Marshal(resp)
	fmt.Fprintln(stdout, string(out))
	if resp.OK {
		return 0
	}
	return exitCode(resp.Error)
}

func exitCode(e *protocol.Error) int {
	switch e.Code {
	case protocol.CodeCommitUnknown:
		return 5
	case protocol.CodeStaleRequestEpoch, protocol.CodeStaleAuthority, protocol.CodeRefMoved,
		protocol.CodeApprovalRequired, protocol.CodeApprovalInvalid:
		return 3
	case protocol.CodeEffectFailed, protocol.CodeRedirectRefused, protocol.CodeResponseTooLarge, protocol.CodeAddressRefused:
		return 6
	}
	if e.Retryable {
		return 4
	}
	return 2
}
