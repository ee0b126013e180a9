package agent

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/agents/agentrootfs"
	"github.com/autonomic-kernel/autonomic/internal/privileged"
	rootfs "github.com/autonomic-kernel/autonomic/rootfs-builder"
)

// The pinned versions the agents rootfs spec installs.
var pinnedVersion = map[string]string{"codex": "codex-cli 0.171.0", "claude": "2.1.332 (Claude Code)", "opencode": "1.18.33"}

var (
	rootfsOnce sync.Once
	rootfsDir  string
	rootfsErr  error
)

// agentsRootfs returns the agents rootfs from the content-addressed cache
// (/var/cache/autonomic/rootfs), building it when absent: ~1.5 min and
// ~1 GB the first time (npm), a verify (~4 s) after. It carries
// autonomic-entry when this tree has its command.
func agentsRootfs(t *testing.T) string {
	t.Helper()
	privileged.Require(t)
	rootfsOnce.Do(func() {
		start := time.Now()
		var digest string
		var entry bool
		rootfsDir, digest, entry, rootfsErr = agentrootfs.Build(context.Background(), "..", "")
		t.Logf("agents rootfs %s (%s) in %s, autonomic-entry added: %v", rootfsDir, digest, time.Since(start).Round(time.Millisecond), entry)
	})
	if rootfsErr != nil {
		t.Fatalf("agents rootfs: %v", rootfsErr)
	}
	return rootfsDir
}

// inRoot resolves p inside root the way the kernel would after chroot:
// absolute symlink targets restart at root, never at the host's /.
func inRoot(t *testing.T, root, p string) string {
	t.Helper()
	cur, rest := "/", strings.Split(strings.Trim(p, "/"), "/")
	for hops := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == ".." {
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, name)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			t.Fatalf("%s inside the rootfs: %v", p, err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if hops++; hops > 40 {
				t.Fatalf("symlink loop at %s", next)
			}
			target, _ := os.Readlink(filepath.Join(root, next))
			if path.IsAbs(target) {
				cur = "/"
			}
			rest = append(strings.Split(strings.Trim(target, "/"), "/"), rest...)
			continue
		}
		cur = next
	}
	return filepath.Join(root, cur)
}

// TestAgentsRootfsRunsEachAgent proves the rootfs carries a working binary
// for every profile: each agent's --version runs from the tree with the
// tree's own dynamic loader and libraries (the host's ld.so.cache ignored,
// and every resolved library checked to lie inside the tree).
func TestAgentsRootfsRunsEachAgent(t *testing.T) {
	root := agentsRootfs(t)
	if err := rootfs.Verify(root); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, rootfs.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	m, err := rootfs.DecodeManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"@openai/codex@0.171.0", "@openai/codex@0.171.0-linux-x64", "@anthropic-ai/claude-code@2.1.332",
		"@anthropic-ai/claude-code-linux-x64@2.1.332", "opencode-ai@1.18.33", "opencode-linux-x64@1.18.33"} {
		if !slices.ContainsFunc(m.Packages, func(p rootfs.Package) bool {
			return p.Name+"@"+p.Version == want && strings.HasPrefix(p.Integrity, "sha512-")
		}) {
			t.Errorf("manifest does not record %s with its integrity: %+v", want, m.Packages)
		}
	}
	libPath := strings.Join([]string{inRoot(t, root, "/usr/lib/x86_64-linux-gnu"), inRoot(t, root, "/lib/x86_64-linux-gnu")}, ":")
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			p, err := Load(name)
			if err != nil {
				t.Fatal(err)
			}
			bin := inRoot(t, root, p.Argv[0])
			argv := []string{bin}
			ef, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			var interp string
			for _, prog := range ef.Progs {
				if prog.Type == elf.PT_INTERP {
					b, _ := io.ReadAll(prog.Open())
					interp = strings.TrimRight(string(b), "\x00")
				}
			}
			ef.Close()
			if interp != "" {
				ld := inRoot(t, root, interp)
				list, err := exec.Command(ld, "--inhibit-cache", "--library-path", libPath, "--list", bin).CombinedOutput()
				if err != nil {
					t.Fatalf("ld.so --list: %v\n%s", err, list)
				}
				for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
					_, res, ok := strings.Cut(line, "=> ")
					if !ok {
						continue
					}
					if lib, _, _ := strings.Cut(res, " "); !strings.HasPrefix(lib, root+"/") {
						t.Errorf("%s resolves %q outside the rootfs", name, line)
					}
				}
				argv = []string{ld, "--inhibit-cache", "--library-path", libPath, bin}
			}
			home := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], "--version")...)
			cmd.Env = []string{"HOME=" + home, "PATH=/nonexistent"}
			cmd.Dir = home
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), pinnedVersion[name]) {
				t.Fatalf("%s --version from the rootfs: %v\n%s", name, err, out)
			}
			t.Logf("%s --version (interp %q): %s", name, interp, bytes.TrimSpace(out))
		})
	}
	if _, err := os.Stat("../entry/cmd/autonomic-entry"); err == nil {
		if _, err := os.Stat(filepath.Join(root, EntryPath)); err != nil {
			t.Errorf("the rootfs lacks %s: %v", EntryPath, err)
		}
	}
}

// seen is one request the recorder received.
type seen struct {
	Method, URI string
	Header      http.Header
	Body        map[string]any
	Raw         string
}

// recorder is a throwaway model server on loopback: it records every
// request and scripts, per wire API, one shell tool call that writes
// proof.txt, then a final text answer once the tool result comes back.
type recorder struct {
	mu   sync.Mutex
	reqs []seen
}

const proofCmd = "echo hi > proof.txt"

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, seen{Method: r.Method, URI: r.RequestURI, Header: r.Header.Clone(), Body: body, Raw: string(raw)})
	rc.mu.Unlock()
	s := string(raw)
	toolTurn := body["tools"] != nil && !strings.Contains(s, "function_call_output") && !strings.Contains(s, `"tool_result"`) && !strings.Contains(s, `"role":"tool"`)
	send := func(lines ...string) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, l := range lines {
			io.WriteString(w, l+"\n\n")
			w.(http.Flusher).Flush()
		}
	}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	switch r.URL.Path {
	case "/v1/responses":
		item := map[string]any{"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": "done", "annotations": []any{}}}}
		if toolTurn {
			item = map[string]any{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "exec_command",
				"arguments": js(map[string]string{"cmd": proofCmd}), "status": "completed"}
		}
		send("event: response.output_item.done\ndata: "+js(map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item}),
			`event: response.completed`+"\n"+`data: {"type":"response.completed","response":{"id":"resp_1","object":"response","status":"completed","output":[],"usage":{"input_tokens":10,"output_tokens":2,"total_tokens":12}}}`)
	case "/v1/messages":
		block, delta, stop := `{"type":"text","text":""}`, js(map[string]any{"type": "text_delta", "text": "done"}), "end_turn"
		if toolTurn {
			block = `{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}`
			delta = js(map[string]any{"type": "input_json_delta", "partial_json": js(map[string]string{"command": proofCmd})})
			stop = "tool_use"
		}
		var out []string
		for _, ev := range []string{
			`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}`,
			`{"type":"content_block_start","index":0,"content_block":` + block + `}`,
			`{"type":"content_block_delta","index":0,"delta":` + delta + `}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"message_delta","delta":{"stop_reason":"` + stop + `","stop_sequence":null},"usage":{"output_tokens":2}}`,
			`{"type":"message_stop"}`,
		} {
			var m map[string]any
			json.Unmarshal([]byte(ev), &m)
			out = append(out, fmt.Sprintf("event: %s\ndata: %s", m["type"], ev))
		}
		send(out...)
	case "/v1/chat/completions":
		first, finish := `{"role":"assistant","content":"done"}`, "stop"
		if toolTurn {
			first = js(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": "call_1", "type": "function",
				"function": map[string]any{"name": "bash", "arguments": js(map[string]string{"command": proofCmd, "description": "write proof"})}}}})
			finish = "tool_calls"
		}
		send(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`+first+`,"finish_reason":null}]}`,
			`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"`+finish+`"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`,
			`data: [DONE]`)
	default:
		http.NotFound(w, r)
	}
}

func toolNames(body map[string]any) []string {
	var out []string
	tools, _ := body["tools"].([]any)
	for _, t := range tools {
		tm, _ := t.(map[string]any)
		n, _ := tm["name"].(string)
		if f, ok := tm["function"].(map[string]any); ok {
			n, _ = f["name"].(string)
		}
		out = append(out, n)
	}
	return out
}

// TestProfilesDriveRealAgents runs each real agent CLI from the agents
// rootfs on the host, outside a domain, as nobody with a fresh HOME, set up
// exactly as its rendered profile says (home files, environment, argv),
// against the loopback recorder. It pins the request shapes the relay and
// the fixture models rely on, and that the scripted tool call edits the
// workspace.
func TestProfilesDriveRealAgents(t *testing.T) {
	root := agentsRootfs(t)
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) { driveAgent(t, root, name, false) })
	}
}

// TestAgentsRunInsideTheRootfs: the same, with each agent chrooted into
// the agents rootfs (a private mount namespace: tmpfs /tmp with HOME at
// /tmp/home, /proc, /dev, the workspace at /workspace) as the worker, uid
// 1000. It proves the rootfs carries what the agents need at run time (a
// shell for their tool calls, libraries, CA bundle), not only --version.
func TestAgentsRunInsideTheRootfs(t *testing.T) {
	root := agentsRootfs(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		privileged.Skip(t, "unshare(1) not found")
	}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) { driveAgent(t, root, name, true) })
	}
}

// chrootScript runs "$@" chrooted into $1 as uid 1000, with $2 as HOME
// (/tmp/home on a fresh tmpfs) and $3 as /workspace; mounts live and die in
// the private mount namespace unshare made, so the cached tree is untouched.
const chrootScript = `set -e
R=$1 H=$2 W=$3; shift 3
mount -t tmpfs -o mode=1777,size=256m tmpfs "$R/tmp"
mkdir "$R/tmp/home"
mount --bind "$H" "$R/tmp/home"
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mount --bind "$W" "$R/workspace"
exec chroot --userspec=1000:1000 "$R" /usr/bin/env -i "$@"`

func driveAgent(t *testing.T, root, name string, inRootfs bool) {
	p, err := Load(name)
	if err != nil {
		t.Fatal(err)
	}
	rc := &recorder{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rc}
	go srv.Serve(ln)
	defer srv.Close()

	argv, err := p.Render("Make the test pass.", "")
	if err != nil {
		t.Fatal(err)
	}
	r := parseRendered(t, argv)
	// The bridge's job, done here by pointing the agent at the recorder.
	local := func(s string) string { return strings.ReplaceAll(s, BridgeAddr, ln.Addr().String()) }

	base, err := os.MkdirTemp("", "agent-host-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	home, ws := filepath.Join(base, "home"), filepath.Join(base, "ws")
	for rel, content := range r.home {
		f := filepath.Join(home, rel)
		os.MkdirAll(filepath.Dir(f), 0o700)
		if err := os.WriteFile(f, []byte(local(content)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(home, 0o700)
	os.MkdirAll(ws, 0o755)
	os.Chmod(base, 0o755)
	uid := 65534
	if inRootfs {
		uid = 1000 // the rootfs's worker
	}
	filepath.Walk(base, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, uid, uid) })

	env := []string{"HOME=" + home, "PATH=" + filepath.Join(root, "usr/local/bin") + ":/usr/bin:/bin"}
	if inRootfs {
		env = []string{"HOME=/tmp/home", "PATH=/usr/local/bin:/usr/bin:/bin"}
	}
	for k, v := range r.env {
		env = append(env, k+"="+local(v))
	}
	agentArgv := append([]string{filepath.Join(root, r.argv[0])}, r.argv[1:]...)
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}
	if inRootfs {
		agentArgv = append(append([]string{"unshare", "-m", "--propagation", "private", "--", "sh", "-c", chrootScript, "sh", root, home, ws},
			env...), append([]string{"/bin/sh", "-c", `cd /workspace && exec "$@"`, "sh"}, r.argv...)...)
		env, cred = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, agentArgv[0], agentArgv[1:]...)
	cmd.Env, cmd.Dir = env, ws
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	elapsed := time.Since(start)
	if b, rerr := os.ReadFile(filepath.Join(ws, "proof.txt")); rerr != nil || string(b) != "hi\n" {
		t.Fatalf("%s did not run the scripted tool call (exit %v, %s):\nproof %q %v\n%s", name, err, elapsed, b, rerr, tail(out.String()))
	}
	t.Logf("%s: exit %v in %s, %d requests", name, err, elapsed.Round(time.Millisecond), len(rc.reqs))

	rc.mu.Lock()
	defer rc.mu.Unlock()
	route := map[string]string{WireResponses: "/v1/responses", WireMessages: "/v1/messages?beta=true", WireChat: "/v1/chat/completions"}[p.WireAPI]
	var withTools, followups, toolless int
	for i, q := range rc.reqs {
		t.Logf("request %d: %s %s tools=%v model=%v stream=%v", i, q.Method, q.URI, toolNames(q.Body), q.Body["model"], q.Body["stream"])
		if q.Method != http.MethodPost || q.URI != route {
			t.Errorf("%s sent %s %s; only POST %s is expected", name, q.Method, q.URI, route)
		}
		if q.Body["model"] != p.Model || q.Body["stream"] != true {
			t.Errorf("%s: model %v stream %v, want %s and streaming", name, q.Body["model"], q.Body["stream"], p.Model)
		}
		if !strings.HasPrefix(q.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: Content-Type %q", name, q.Header.Get("Content-Type"))
		}
		switch {
		case strings.Contains(q.Raw, "function_call_output") || strings.Contains(q.Raw, `"tool_result"`) || strings.Contains(q.Raw, `"role":"tool"`):
			followups++
		case q.Body["tools"] != nil:
			withTools++
		default:
			toolless++
		}
		tools := toolNames(q.Body)
		switch name {
		case "codex":
			if q.Header.Get("Authorization") != "" || q.Header.Get("Accept") != "text/event-stream" {
				t.Errorf("codex headers: Authorization %q Accept %q", q.Header.Get("Authorization"), q.Header.Get("Accept"))
			}
			if !slices.Contains(tools, "exec_command") || !slices.Contains(tools, "apply_patch") {
				t.Errorf("codex tools %v lack exec_command/apply_patch", tools)
			}
		case "claude":
			if q.Header.Get("X-Api-Key") != "autonomic-placeholder" || q.Header.Get("Authorization") != "" || q.Header.Get("Anthropic-Version") == "" {
				t.Errorf("claude headers: %v", q.Header)
			}
			for _, want := range []string{"Bash", "Edit", "Write"} {
				if !slices.Contains(tools, want) {
					t.Errorf("claude tools %v lack %s", tools, want)
				}
			}
		case "opencode":
			if q.Header.Get("Authorization") != "Bearer autonomic-placeholder" {
				t.Errorf("opencode Authorization %q", q.Header.Get("Authorization"))
			}
			if q.Body["tools"] != nil {
				for _, want := range []string{"bash", "edit", "write"} {
					if !slices.Contains(tools, want) {
						t.Errorf("opencode tools %v lack %s", tools, want)
					}
				}
			}
		}
	}
	if withTools < 1 || followups < 1 {
		t.Errorf("%s: %d tool-offering requests, %d tool-result follow-ups; want at least one of each", name, withTools, followups)
	}
	if name == "opencode" && toolless < 1 {
		t.Errorf("opencode sent no tool-less title request")
	}
}

func tail(s string) string {
	if len(s) > 3000 {
		return "…" + s[len(s)-3000:]
	}
	return s
}
