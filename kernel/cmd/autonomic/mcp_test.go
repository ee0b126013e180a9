package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/mcp"
	"github.com/autonomic-kernel/autonomic/kernel/server"
	"github.com/autonomic-kernel/autonomic/kernel/server/servertest"
)

// mcpKernel is a running test kernel with one episode holding one effect,
// its API socket in a directory other accounts may traverse.
type mcpKernel struct {
	socket    string
	episodeID string
	effectID  string
}

func startMCPKernel(t *testing.T, db string, api map[string]any) mcpKernel {
	t.Helper()
	dir, err := os.MkdirTemp("", "autonomic-mcp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	api["socket"] = sock
	k := servertest.New(t, db, map[string]any{"api": api})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stop, err := server.Start(context.Background(), k.Config, hclog.NewNullLogger(), server.Hooks{})
	if err != nil {
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() { stop() })
	_, ep, eff := servertest.SeedEffect(t, ctx, k.Cluster.KernelConnString(db))
	return mcpKernel{socket: sock, episodeID: ep.ID.String(), effectID: eff.ID.String()}
}

// call runs one tool and returns its text and whether it was a tool error.
func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		// The SDK's own schema check refuses some input as a protocol error.
		return err.Error(), true
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

// Every tool, through the production command's stdio server and the SDK's
// own client, against a running kernel with a real store.
func TestMCPToolsAgainstARunningKernel(t *testing.T) {
	k := startMCPKernel(t, "mcptools", map[string]any{})
	cin, sout := io.Pipe()
	sin, cout := io.Pipe()
	done := make(chan int, 1)
	var stderr strings.Builder
	go func() { done <- mcpCmd([]string{"--socket", k.socket}, sin, sout, &stderr) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).
		Connect(ctx, &sdk.IOTransport{Reader: cin, Writer: cout}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.InputSchema == nil {
			t.Errorf("tool %s has no input schema", tl.Name)
		}
	}
	if !slices.Equal(names, mcp.Tools) && !sameSet(names, mcp.Tools) {
		t.Fatalf("tools %v, want exactly %v", names, mcp.Tools)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"episodes_list", map[string]any{"limit": 5}, k.episodeID},
		{"episode_show", map[string]any{"id": k.episodeID}, `"state":"active"`},
		{"effects_list", map[string]any{"episode_id": k.episodeID}, k.effectID},
		{"effect_show", map[string]any{"id": k.effectID}, `"state":"proposed"`},
		{"events_tail", map[string]any{"episode_id": k.episodeID, "limit": 3}, `"seq"`},
		{"events_tail", map[string]any{"episode_id": k.episodeID, "after": 0, "limit": 1}, `"seq":1`},
		{"ledger_verify", map[string]any{"episode_id": k.episodeID}, `"ok":true`},
		{"egress_list", map[string]any{"episode_id": k.episodeID}, `"fetches":[]`},
		{"actions_list", map[string]any{"limit": 5}, `"actions":[]`},
		{"tasks_list", map[string]any{"limit": 5}, `"tasks":[]`},
	} {
		text, isErr := call(t, cs, c.tool, c.args)
		if isErr || !strings.Contains(text, c.want) {
			t.Errorf("%s %v: error=%v %s (want %q)", c.tool, c.args, isErr, text, c.want)
		}
	}
	// Bad input: a typed error from the closed catalogue, nothing read.
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"episode_show", map[string]any{"id": "../../v1/kernel"}, "invalid_field"},
		{"episode_show", map[string]any{"id": strings.ToUpper(k.episodeID) + "0"}, "invalid_field"},
		{"episodes_list", map[string]any{"limit": 501}, "invalid_field"},
		{"events_tail", map[string]any{"episode_id": k.episodeID, "after": -4}, "invalid_field"},
		{"effect_show", map[string]any{"id": "00000000-0000-0000-0000-000000000000"}, "not_found"},
		{"episode_show", map[string]any{}, "id"},
		{"patch_show", map[string]any{"id": "00000000-0000-0000-0000-000000000000"}, "not_found"},
		{"episode_start", map[string]any{"spec": "not an object"}, "spec"},
		// This kernel runs no episode controller: start reaches the API,
		// which says so (a controller's refusals of unsigned policies are
		// TestServeRunsEpisodes's).
		{"episode_start", map[string]any{"spec": map[string]any{"origin_intent": "x"}}, "unknown_action"},
		{"task_submit", map[string]any{"spec": map[string]any{"origin_intent": "x"}}, "unknown_action"},
		{"task_submit", map[string]any{"spec": 7}, "spec"},
		{"tasks_list", map[string]any{"state": "sleeping"}, "invalid_field"},
		{"task_show", map[string]any{"id": "00000000-0000-0000-0000-000000000000"}, "not_found"},
		{"task_show", map[string]any{"id": "../x"}, "invalid_field"},
	} {
		text, isErr := call(t, cs, c.tool, c.args)
		if !isErr || !strings.Contains(text, c.want) {
			t.Errorf("%s %v: error=%v %q, want an error naming %q", c.tool, c.args, isErr, text, c.want)
		}
	}
	if _, isErr := call(t, cs, "effect_approve", map[string]any{"id": k.effectID}); !isErr {
		t.Fatal("a tool outside the closed set answered")
	}
	cs.Close()
	cout.Close()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("mcp exited %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("mcp did not exit when its client hung up")
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// buildKernel builds the autonomic command where other accounts may run it.
func buildKernel(t *testing.T) string {
	t.Helper()
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "autonomic-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "autonomic")
	cmd := exec.Command("go", "build", "-o", bin, "./kernel/cmd/autonomic")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// as runs cmd as account name.
func as(t *testing.T, cmd *exec.Cmd, name string) {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		privileged.Skip(t, "no account "+name+" (scripts/provision_host.sh makes autonomic)")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
}

// No tool grants authority, and none reads more than its caller may: the
// command, run as another account over stdio, reads what that account's
// API permission allows, and a caller the API refuses gets peer_refused
// from every tool even when the socket itself lets it connect.
func TestMCPBoundedByTheCallersAPIPermissions(t *testing.T) {
	if os.Geteuid() != 0 {
		privileged.Skip(t, "needs root to run the command as other accounts")
	}
	bin := buildKernel(t)
	k := startMCPKernel(t, "mcpperm", map[string]any{"operator_group": "autonomic"})
	session := func(account string) *sdk.ClientSession {
		cmd := exec.Command(bin, "mcp", "--socket", k.socket)
		as(t, cmd, account)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect as %s: %v", account, err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	// The operator group's member reads.
	if text, isErr := call(t, session("autonomic"), "episode_show", map[string]any{"id": k.episodeID}); isErr || !strings.Contains(text, k.episodeID) {
		t.Fatalf("operator-group member: error=%v %s", isErr, text)
	}
	// An account outside the group, with the socket opened to everyone:
	// the API's own peer check still refuses it, and the tool says so.
	if err := os.Chmod(k.socket, 0o666); err != nil {
		t.Fatal(err)
	}
	nobody := session("nobody")
	for _, tool := range mcp.Tools {
		var args map[string]any
		switch tool {
		case "episodes_list":
		case "episode_show":
			args = map[string]any{"id": k.episodeID}
		case "effect_show", "patch_show":
			args = map[string]any{"id": k.effectID}
		case "actions_list", "tasks_list":
		case "task_show":
			args = map[string]any{"id": k.episodeID}
		case "episode_start", "task_submit":
			args = map[string]any{"spec": map[string]any{"origin_intent": "x"}}
		default:
			args = map[string]any{"episode_id": k.episodeID}
		}
		if text, isErr := call(t, nobody, tool, args); !isErr || !strings.Contains(text, "peer_refused") {
			t.Errorf("%s as nobody: error=%v %s (want peer_refused)", tool, isErr, text)
		}
	}
}

// The streamable HTTP transport: a socket only the serving account can
// open, and the same tools behind it.
func TestMCPStreamableHTTPOnAPrivateSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		privileged.Skip(t, "needs root to run the command as the service account")
	}
	bin := buildKernel(t)
	k := startMCPKernel(t, "mcphttp", map[string]any{"operator_group": "autonomic"})
	dir, err := os.MkdirTemp("", "autonomic-mcp-http-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	u, _ := user.Lookup("autonomic")
	if u != nil {
		uid, _ := strconv.Atoi(u.Uid)
		os.Chown(dir, uid, -1)
	}
	sock := filepath.Join(dir, "mcp.sock")
	cmd := exec.Command(bin, "mcp", "--socket", k.socket, "--listen", sock)
	as(t, cmd, "autonomic")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	var fi os.FileInfo
	for fi, err = os.Stat(sock); err != nil && time.Now().Before(deadline); fi, err = os.Stat(sock) {
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no socket: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).
		Connect(ctx, &sdk.StreamableClientTransport{Endpoint: "http://autonomic/", HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	text, isErr := call(t, cs, "effects_list", map[string]any{"episode_id": k.episodeID})
	var got struct {
		Effects []struct {
			ID string `json:"id"`
		} `json:"effects"`
	}
	if isErr || json.Unmarshal([]byte(text), &got) != nil || len(got.Effects) != 1 || got.Effects[0].ID != k.effectID {
		t.Fatalf("effects_list over HTTP: error=%v %s", isErr, text)
	}
}
