package entry

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary is autonomic-entry when ENTRY_MAIN is set, so tests run
// the real command as a process of its own (signals, exit status).
func TestMain(m *testing.M) {
	if os.Getenv("ENTRY_MAIN") == "1" {
		os.Exit(Main(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

func entryCmd(t *testing.T, home string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "ENTRY_MAIN=1", "HOME="+home)
	return cmd
}

func TestWriteHome(t *testing.T) {
	home := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(home, ".config")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "target"), filepath.Join(home, "link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(home, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{".config/agent/config.toml", "link", "fifo"} {
		if err := WriteHome(home, HomeFile{Rel: rel, Data: []byte("x")}); err == nil {
			t.Errorf("%s: written through a symlink or into a FIFO", rel)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("a home file landed outside HOME: %v", entries)
	}
	if err := os.WriteFile(filepath.Join(home, "old"), []byte("a long old content"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []HomeFile{{".codex/config.toml", []byte("model = 1\n")}, {"old", []byte("new")}, {".codex/auth.json", nil}} {
		if err := WriteHome(home, f); err != nil {
			t.Fatalf("%s: %v", f.Rel, err)
		}
		p := filepath.Join(home, f.Rel)
		b, err := os.ReadFile(p)
		fi, _ := os.Lstat(p)
		if err != nil || string(b) != string(f.Data) || fi.Mode() != 0o600 {
			t.Errorf("%s: %q %v %v", f.Rel, b, fi.Mode(), err)
		}
	}
	if fi, err := os.Stat(filepath.Join(home, ".codex")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf(".codex: %v %v", fi.Mode(), err)
	}
}

// unixServer accepts on a Unix socket, reads each connection to its end
// (the bridge's half-close), then answers with what it read and closes.
func unixServer(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "relay.sock")
	ln, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				_, _ = c.Write(append([]byte("got "), b...))
			}()
		}
	}()
	return p
}

// TestBridgeForwardsBothWaysWithHalfClose: what the client writes reaches
// the socket, the client's half-close reaches the server as EOF, and the
// answer written after it comes back.
func TestBridgeForwardsBothWaysWithHalfClose(t *testing.T) {
	b := Bridge{Addr: netip.MustParseAddrPort("127.0.0.1:0"), Socket: unixServer(t)}
	ln, err := b.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go b.Serve(ln)
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("POST /v1/responses"))
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != "got POST /v1/responses" {
			t.Fatalf("through the bridge: %q %v", got, err)
		}
	}
	if _, err := (Bridge{Addr: netip.MustParseAddrPort("0.0.0.0:0"), Socket: b.Socket}).Listen(); err == nil {
		t.Error("a bridge listened on a non-loopback address")
	}
}

func TestBridgeToNothingAnswers502(t *testing.T) {
	b := Bridge{Addr: netip.MustParseAddrPort("127.0.0.1:0"), Socket: filepath.Join(t.TempDir(), "absent.sock")}
	ln, err := b.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go b.Serve(ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "HTTP/1.1 502 Bad Gateway\r\n" {
		t.Fatalf("%q %v", line, err)
	}
}

// TestEntryRunsArgv: the real command writes its home file, bridges, runs
// ARGV with the --env pairs and stdin /dev/null, and exits with its status.
func TestEntryRunsArgv(t *testing.T) {
	home, sock := t.TempDir(), unixServer(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0") // a free port
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	script := `cat "$HOME/.agent/config"; echo "FOO=$FOO BAR=$BAR"; read line && echo STDIN=data || echo STDIN=empty
exec 3<>/dev/tcp/127.0.0.1/` + strconv.Itoa(port) + ` && echo hello >&3 && echo BRIDGE=up; exit 3`
	cmd := entryCmd(t, home, "--home-file", ".agent/config=Y29uZmln", "--env", "FOO=foo", "--env", "BAR=1=2",
		"--bridge", addr+"="+sock, "--", "bash", "-c", script)
	cmd.Env = append(cmd.Env, "FOO=overridden")
	cmd.Stdin = strings.NewReader("data\n")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("exit: %v\n%s", err, out)
	}
	if want := "configFOO=foo BAR=1=2\nSTDIN=empty\nBRIDGE=up\n"; string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
}

// TestEntryForwardsSignals: SIGTERM to autonomic-entry reaches ARGV, whose
// status (here its trap's) is autonomic-entry's; a signal that kills ARGV
// gives 128+N.
func TestEntryForwardsSignals(t *testing.T) {
	for _, c := range []struct {
		script string
		sig    syscall.Signal
		code   int
	}{
		{`trap 'exit 7' TERM; echo ready; while :; do sleep 0.05; done`, unix.SIGTERM, 7},
		{`trap 'exit 9' INT; echo ready; while :; do sleep 0.05; done`, unix.SIGINT, 9},
		{`echo ready; exec sleep 60`, unix.SIGTERM, 128 + 15},
	} {
		cmd := entryCmd(t, t.TempDir(), "--", "bash", "-c", c.script)
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("%q %v", line, err)
		}
		_ = cmd.Process.Signal(c.sig)
		err := cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != c.code {
			t.Errorf("%s after %v: %v, want exit %d", c.script, c.sig, err, c.code)
		}
	}
}

func TestEntryRefusesBadCommandLines(t *testing.T) {
	for _, args := range [][]string{{"codex"}, {"--bridge", "10.0.0.1:80=/s", "--", "true"}, {"--home-file", "../x=eA==", "--", "true"}} {
		if err := entryCmd(t, t.TempDir(), args...).Run(); err == nil || err.(*exec.ExitError).ExitCode() != 2 {
			t.Errorf("%q: %v, want exit 2", args, err)
		}
	}
	if err := entryCmd(t, "relative", "--", "true").Run(); err == nil || err.(*exec.ExitError).ExitCode() != 1 {
		t.Errorf("relative HOME: %v, want exit 1", err)
	}
}
