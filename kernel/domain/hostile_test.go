package domain_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// rawRequest runs the launcher with raw bytes on stdin and returns its
// first frame decoded.
func rawRequest(t *testing.T, in []byte) *protocol.LauncherResponse {
	t.Helper()
	cmd := exec.Command(bed.Launcher)
	cmd.Stdin = bytes.NewReader(in)
	var out bytes.Buffer
	cmd.Stdout = &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("launcher did not answer within 30s")
	}
	b, err := protocol.ReadFrame(&out, protocol.LauncherResponseMax, time.Time{})
	if err != nil {
		t.Fatalf("no frame from launcher: %v (raw %q)", err, out.Bytes())
	}
	r, err := protocol.DecodeLauncherResponse(b)
	if err != nil {
		t.Fatalf("launcher sent an inadmissible frame: %v: %s", err, b)
	}
	return r
}

func frame(payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	return append(b, payload...)
}

func jsonFrame(t *testing.T, v map[string]any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return frame(b)
}

func createReq(id, ws string) map[string]any {
	return map[string]any{"protocol": 1, "action": "create", "request_id": "hostile", "domain_id": id, "generation": 1,
		"workspace_id": ws, "argv": []string{"/bin/true"}, "one_shot": true}
}

func mountCount(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(ownMounts(string(b)), "\n")
}

// TestHostileRequests sends requests a compromised kernel might: each gets
// its catalogued error and leaves no domain, cgroup, uid slot, mount or
// process behind.
func TestHostileRequests(t *testing.T) {
	_, _ = setup(t)
	ws, _ := workspace(t, map[string]string{"f": "x"})
	// A workspace id that is a symlink to a host directory.
	if err := os.Symlink("/etc", filepath.Join(bed.Workspaces, "planted")); err != nil {
		t.Fatal(err)
	}
	// Broker sockets: a symlink, and a directory posing as a socket.
	if err := os.Symlink("/run/systemd/private", filepath.Join(bed.Sockets, "symlinked.sock")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(bed.Sockets, "notsocket.sock"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The plants outlive nothing: -count=2 plants them again.
	t.Cleanup(func() {
		for _, p := range []string{filepath.Join(bed.Workspaces, "planted"), filepath.Join(bed.Sockets, "symlinked.sock"),
			filepath.Join(bed.Sockets, "notsocket.sock")} {
			_ = os.Remove(p)
		}
	})
	with := func(m map[string]any, k string, v any) map[string]any { m[k] = v; return m }

	cases := []struct {
		name string
		id   string
		in   []byte
		want protocol.Code
	}{
		{"unknown action", "", jsonFrame(t, map[string]any{"protocol": 1, "action": "exec", "request_id": "r"}), protocol.CodeUnknownAction},
		{"unknown field", "h-unknown-field", jsonFrame(t, with(createReq("h-unknown-field", ws), "privileged", true)), protocol.CodeUnknownField},
		{"nested unknown field", "h-nested", jsonFrame(t, with(createReq("h-nested", ws), "limits", map[string]any{"pids": 1, "swap": 2})), protocol.CodeUnknownField},
		{"duplicate key", "", frame([]byte(`{"protocol":1,"action":"inspect","request_id":"r","domain_id":"a","domain_id":"b"}`)), protocol.CodeDuplicateKey},
		{"oversized frame", "", binary.BigEndian.AppendUint32(nil, protocol.LauncherRequestMax+1), protocol.CodeFrameTooLarge},
		{"truncated frame", "", append(binary.BigEndian.AppendUint32(nil, 100), []byte(`{"protocol":1`)...), protocol.CodeFrameTruncated},
		{"wrong version", "", jsonFrame(t, map[string]any{"protocol": protocol.LauncherVersion + 1, "action": "preflight", "request_id": "r"}), protocol.CodeUnsupportedVersion},
		{"trailing data", "", frame([]byte(`{"protocol":1,"action":"preflight","request_id":"r"} {}`)), protocol.CodeTrailingData},
		{"not utf8", "", frame([]byte("{\"protocol\":1,\"action\":\"preflight\",\"request_id\":\"r\xff\"}")), protocol.CodeNotUTF8},
		{"dotdot id", "", jsonFrame(t, createReq("../x", ws)), protocol.CodeInvalidField},
		{"dotdot workspace", "h-ws", jsonFrame(t, createReq("h-ws", "../etc")), protocol.CodeInvalidField},
		{"symlinked workspace", "h-symws", jsonFrame(t, createReq("h-symws", "planted")), protocol.CodePathUnsafe},
		{"missing workspace", "h-nows", jsonFrame(t, createReq("h-nows", "nope")), protocol.CodeWorkspaceNotFound},
		{"symlinked socket", "h-symsock", jsonFrame(t, with(createReq("h-symsock", ws), "broker_socket", "symlinked")), protocol.CodePathUnsafe},
		{"directory as socket", "h-dirsock", jsonFrame(t, with(createReq("h-dirsock", ws), "broker_socket", "notsocket")), protocol.CodePathUnsafe},
		{"symlinked relay socket", "h-symrelay", jsonFrame(t, with(createReq("h-symrelay", ws), "relay_socket", "symlinked")), protocol.CodePathUnsafe},
		{"directory as relay socket", "h-dirrelay", jsonFrame(t, with(createReq("h-dirrelay", ws), "relay_socket", "notsocket")), protocol.CodePathUnsafe},
		{"missing relay socket", "h-norelay", jsonFrame(t, with(createReq("h-norelay", ws), "relay_socket", "absent")), protocol.CodeNotFound},
		{"relay socket path", "h-pathrelay", jsonFrame(t, with(createReq("h-pathrelay", ws), "relay_socket", "../sockets/x")), protocol.CodeInvalidField},
		{"unknown rootfs", "h-norootfs", jsonFrame(t, with(createReq("h-norootfs", ws), "rootfs", "absent")), protocol.CodeNotFound},
		{"rootfs path", "h-pathrootfs", jsonFrame(t, with(createReq("h-pathrootfs", ws), "rootfs", "/etc")), protocol.CodeInvalidField},
		{"env outside allowlist", "h-env", jsonFrame(t, with(createReq("h-env", ws), "env", map[string]string{"LD_PRELOAD": "/tmp/x.so"})), protocol.CodeInvalidField},
		{"limit above max", "h-limit", jsonFrame(t, with(createReq("h-limit", ws), "limits", map[string]any{"nproc": 1 << 40})), protocol.CodeLimitExceeded},
		{"unknown checkpoint", "h-ckpt", jsonFrame(t, with(createReq("h-ckpt", ws), "checkpoint", strings.Repeat("ab", 32))), protocol.CodeCheckpointNotFound},
		{"argv with NUL", "h-nul", jsonFrame(t, with(createReq("h-nul", ws), "argv", []string{"/bin/sh\x00x"})), protocol.CodeInvalidField},
		{"bad seccomp digest", "h-bpf", jsonFrame(t, with(createReq("h-bpf", ws), "seccomp", map[string]any{"program_b64": "BgAAAAAA/38=", "sha256": strings.Repeat("0", 64)})), protocol.CodeInvalidField},
		{"freeze unknown id", "", jsonFrame(t, map[string]any{"protocol": 1, "action": "freeze", "request_id": "r", "domain_id": "never-existed"}), protocol.CodeDomainNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mounts := mountCount(t)
			r := rawRequest(t, c.in)
			if r.Type != protocol.TypeError || r.Error.Code != c.want {
				t.Fatalf("got %s %+v, want error %s", r.Type, r.Error, c.want)
			}
			if c.id != "" {
				assertNoTrace(t, c.id)
			}
			if got := mountCount(t); got != mounts {
				t.Errorf("host mount table changed: %d -> %d entries", mounts, got)
			}
		})
	}
}

// TestHostileCheckpoints stores archives that try to leave the upper layer
// under their true digests: each is refused as checkpoint_unsafe and
// nothing is written outside the domain.
func TestHostileCheckpoints(t *testing.T) {
	_, _ = setup(t)
	ws, _ := workspace(t, nil)
	victim := filepath.Join(bed.Dir, "victim")
	if err := os.MkdirAll(filepath.Join(bed.State, "checkpoints"), 0o700); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]*tar.Header{
		"dotdot":          {{Name: "../../../../victim", Typeflag: tar.TypeReg, Mode: 0o644, Size: 0}},
		"absolute":        {{Name: victim, Typeflag: tar.TypeReg, Mode: 0o644}},
		"through symlink": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: bed.Dir, Mode: 0o777}, {Name: "l/victim", Typeflag: tar.TypeReg, Mode: 0o644}},
		"device node":     {{Name: "mem", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1, Mode: 0o666}},
		"hard link":       {{Name: "passwd", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}},
		"foreign xattr":   {{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755, PAXRecords: map[string]string{"SCHILY.xattr.security.capability": "x"}}},
		"owner outside":   {{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644, Uid: 70000}},
	}
	for name, hdrs := range cases {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, h := range hdrs {
				h.Format = tar.FormatPAX
				if err := tw.WriteHeader(h); err != nil {
					t.Fatal(err)
				}
			}
			_ = tw.Close()
			sum := sha256.Sum256(buf.Bytes())
			digest := hex.EncodeToString(sum[:])
			if err := os.WriteFile(filepath.Join(bed.State, "checkpoints", digest+".tar"), buf.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			id := newID("hc")
			req := createReq(id, ws)
			req["checkpoint"] = digest
			r := rawRequest(t, jsonFrame(t, req))
			if r.Type != protocol.TypeError || r.Error.Code != protocol.CodeCheckpointUnsafe {
				t.Fatalf("got %s %+v, want checkpoint_unsafe", r.Type, r.Error)
			}
			if _, err := os.Lstat(victim); err == nil {
				t.Fatalf("extraction wrote outside the upper layer")
			}
			assertNoTrace(t, id)
		})
	}
}

func TestRootfsMismatchIsRefused(t *testing.T) {
	_, _ = setup(t)
	ws, _ := workspace(t, nil)
	manifest := filepath.Join(bed.Rootfs, "manifest.json")
	orig, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(manifest, orig, 0o644) })
	if err := os.WriteFile(manifest, append(bytes.Clone(orig), ' '), 0o644); err != nil {
		t.Fatal(err)
	}
	id := newID("rm")
	r := rawRequest(t, jsonFrame(t, createReq(id, ws)))
	if r.Type != protocol.TypeError || r.Error.Code != protocol.CodeRootfsMismatch {
		t.Fatalf("got %s %+v, want rootfs_mismatch", r.Type, r.Error)
	}
	assertNoTrace(t, id)
}

func TestLauncherRefusesArguments(t *testing.T) {
	_, _ = setup(t)
	out, _ := exec.Command(bed.Launcher, "--config", "/tmp/evil.json").Output()
	b, err := protocol.ReadFrame(bytes.NewReader(out), protocol.LauncherResponseMax, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := protocol.DecodeLauncherResponse(b)
	if err != nil || r.Type != protocol.TypeError || r.Error.Code != protocol.CodeInvalidField {
		t.Fatalf("launcher with arguments: %+v %v", r, err)
	}
}
