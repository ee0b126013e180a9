package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// GitLimits bound every git the broker runs. The defaults hold when a
// field is zero.
type GitLimits struct {
	// MaxResultBytes is the hard cap on what one patch may add: its
	// binary results and added lines, measured from the patch before git
	// runs (default 64 MiB). A lease's budget.bytes_per_effect lowers it.
	MaxResultBytes int64
	// MemoryBytes is git's RLIMIT_AS (default 1 GiB).
	MemoryBytes int64
	// Timeout bounds one git invocation (default 30 s; RLIMIT_CPU too).
	Timeout time.Duration
	// MaxOutputBytes bounds what one git may print (default 4 MiB).
	MaxOutputBytes int
	// DiskReserveBytes is the free space the repository's filesystem keeps:
	// a build that would cross it is refused first (default 0: none).
	DiskReserveBytes int64
}

func (l GitLimits) withDefaults() GitLimits {
	if l.MaxResultBytes <= 0 {
		l.MaxResultBytes = 64 << 20
	}
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = 1 << 30
	}
	if l.Timeout <= 0 {
		l.Timeout = 30 * time.Second
	}
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = 4 << 20
	}
	return l
}

// gitPath is the fixed search path for git: never the kernel's PATH.
var gitPath = []string{"/usr/bin", "/bin", "/usr/local/bin"}

// gitBinary resolves bin ("" or "git": the first git in gitPath; an
// absolute path is taken as configured).
func gitBinary(bin string) (string, error) {
	if bin != "" && bin != "git" {
		if !filepath.IsAbs(bin) {
			return "", fmt.Errorf("git binary %q is not absolute", bin)
		}
		return bin, nil
	}
	for _, d := range gitPath {
		p := filepath.Join(d, "git")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("git not found in " + strings.Join(gitPath, ":"))
}

// gitRun is one git invocation.
type gitRun struct {
	bin, repo, index string
	stdin            []byte
	env              []string
	// quarantine, when set, is where new objects go; the repository's own
	// objects are an alternate, and ref updates are refused.
	quarantine string
	limits     GitLimits
	// log, when set, is the operator's log, the only place git's stderr
	// goes.
	log hclog.Logger
}

// gitBaseConfig disables every configurable execution path: no system or
// global configuration, no hooks, no fsmonitor, no attributes file, no
// pager, no external diff, no network protocol not named, no automatic gc;
// pack windows are small enough for the memory limit.
var gitBaseConfig = []string{
	"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.attributesFile=/dev/null",
	"-c", "core.pager=cat", "-c", "diff.external=", "-c", "protocol.allow=never", "-c", "protocol.file.allow=always",
	"-c", "protocol.git.allow=always", "-c", "protocol.https.allow=always", "-c", "safe.directory=*", "-c", "gc.auto=0", "-c", "maintenance.auto=false",
	"-c", "core.packedGitWindowSize=32m", "-c", "core.packedGitLimit=256m", "-c", "core.autocrlf=false",
	"-c", "credential.helper=", "-c", "core.askPass=",
	// Refuse, whatever the repository says, the paths NTFS and HFS+ read
	// as .git (GIT~1, ".git.", ".git::$INDEX_ALLOCATION", ignorable code
	// points): a checkout of them on such a system writes into .git.
	"-c", "core.protectNTFS=true", "-c", "core.protectHFS=true",
}

// run executes git with a fixed PATH and environment, under RLIMIT_AS,
// RLIMIT_FSIZE and RLIMIT_CPU, a timeout and capped output. The limits
// are set on the child before it is given its input: git reads its patch
// from stdin before it does any work that grows with it, so nothing a
// patch causes runs unlimited.
func (r gitRun) run(ctx context.Context, args ...string) ([]byte, error) {
	lim := r.limits.withDefaults()
	bin, err := gitBinary(r.bin)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	argv := append(append(append([]string{}, gitBaseConfig...), "--git-dir="+r.repo), args...)
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Env = append([]string{
		"PATH=" + strings.Join(gitPath, ":"), "HOME=/nonexistent", "LC_ALL=C", "TZ=UTC",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", "GIT_ATTR_NOSYSTEM=1",
		"GIT_NO_REPLACE_OBJECTS=1", "GIT_OPTIONAL_LOCKS=0", "GIT_ASKPASS=/bin/false", "SSH_ASKPASS=/bin/false",
	}, r.env...)
	if r.index != "" {
		cmd.Env = append(cmd.Env, "GIT_INDEX_FILE="+r.index)
	}
	if r.quarantine != "" {
		cmd.Env = append(cmd.Env, "GIT_OBJECT_DIRECTORY="+r.quarantine, "GIT_QUARANTINE_PATH="+r.quarantine,
			"GIT_ALTERNATE_OBJECT_DIRECTORIES="+filepath.Join(r.repo, "objects"))
	}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, errb := &cappedBuffer{max: lim.MaxOutputBytes}, &cappedBuffer{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = out, errb
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pid := cmd.Process.Pid
	fsize := uint64(lim.MaxResultBytes + 16<<20)
	cpu := uint64(lim.Timeout/time.Second) + 1
	for _, l := range []struct {
		res int
		v   uint64
	}{{unix.RLIMIT_AS, uint64(lim.MemoryBytes)}, {unix.RLIMIT_FSIZE, fsize}, {unix.RLIMIT_CPU, cpu}} {
		// ESRCH: a git that needs no input may already have exited.
		if err := unix.Prlimit(pid, l.res, &unix.Rlimit{Cur: l.v, Max: l.v}, nil); err != nil && !errors.Is(err, unix.ESRCH) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = cmd.Wait()
			return nil, fmt.Errorf("git limits: %w", err)
		}
	}
	_, werr := io.Copy(stdin, bytes.NewReader(r.stdin))
	_ = stdin.Close()
	err = cmd.Wait()
	switch {
	case out.over:
		return nil, protocol.Errorf(protocol.CodeLimitExceeded, "git %s printed more than %d bytes", gitVerb(args), lim.MaxOutputBytes)
	case ctx.Err() != nil:
		return nil, protocol.Errorf(protocol.CodeTargetTimeout, "git %s exceeded %s", gitVerb(args), lim.Timeout)
	case err != nil:
		// git's stderr may quote the patch or the repository ("invalid
		// path '.git/config'"): an error carries only the verb and the
		// exit status, since it can become a denial's reason a worker or
		// its agent reads. The operator's log keeps the rest.
		if r.log != nil {
			r.log.Warn("git failed", "verb", gitVerb(args), "error", err, "stderr", fmt.Sprintf("%.400s", errb.String()))
		}
		if strings.Contains(errb.String(), "invalid path") {
			return out.Bytes(), fmt.Errorf("git %s: %w: %w", gitVerb(args), errInvalidPath, err)
		}
		return out.Bytes(), fmt.Errorf("git %s: %w", gitVerb(args), err)
	case werr != nil:
		return out.Bytes(), fmt.Errorf("git %s: stdin: %w", gitVerb(args), werr)
	}
	return out.Bytes(), nil
}

// errInvalidPath: git refused a path of the patch (a .git spelling NTFS or
// HFS+ reads as .git, with core.protectNTFS/protectHFS pinned): the patch
// is forbidden, not merely failed.
var errInvalidPath = errors.New("git refused a path")

// applyFailed is the error of a patch git did not apply.
func applyFailed(err error) error {
	if errors.Is(err, errInvalidPath) {
		return protocol.Errorf(protocol.CodeForbidden, "the patch names a path git refuses")
	}
	return protocol.Errorf(protocol.CodeEffectFailed, "patch does not apply: %w", err)
}

// gitVerb is the subcommand of args, past any "-c name=value" options.
func gitVerb(args []string) string {
	for len(args) >= 2 && args[0] == "-c" {
		args = args[2:]
	}
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// cappedBuffer keeps at most max bytes; a write beyond fails, which ends
// the copy from the child's pipe (the child then gets EPIPE).
type cappedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if c.Len()+len(p) > c.max {
		c.over = true
		return 0, errors.New("output cap")
	}
	return c.Buffer.Write(p)
}

// runGit is a plain git invocation with the default limits.
func runGit(ctx context.Context, bin, repo, index string, stdin []byte, extraEnv []string, args ...string) ([]byte, error) {
	return gitRun{bin: bin, repo: repo, index: index, stdin: stdin, env: extraEnv}.run(ctx, args...)
}

// quarantinePrefix names the quarantine directories in a repository's
// objects directory (git's own receive-pack quarantine is "incoming-").
const quarantinePrefix = "incoming-autonomic-"

// newQuarantine makes an object directory beside the repository's objects,
// on the same filesystem so that migrating is a rename, and sweeps
// quarantines a killed broker left behind.
func newQuarantine(repo string) (string, error) {
	objects := filepath.Join(repo, "objects")
	if ents, err := os.ReadDir(objects); err == nil {
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), quarantinePrefix) {
				continue
			}
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
				_ = os.RemoveAll(filepath.Join(objects, e.Name()))
			}
		}
	}
	return os.MkdirTemp(objects, quarantinePrefix)
}

// migrateQuarantine moves a quarantine's objects into the repository:
// loose objects first, then packs (.pack before its .idx, so an index
// never names a missing pack), as git's tmp_objdir does.
func migrateQuarantine(q, repo string) error {
	objects := filepath.Join(repo, "objects")
	ents, err := os.ReadDir(q)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() || len(e.Name()) != 2 {
			continue
		}
		src, dst := filepath.Join(q, e.Name()), filepath.Join(objects, e.Name())
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		files, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, f := range files {
			if err := os.Rename(filepath.Join(src, f.Name()), filepath.Join(dst, f.Name())); err != nil {
				return err
			}
		}
		if err := syncDir(dst); err != nil {
			return err
		}
	}
	packs, err := os.ReadDir(filepath.Join(q, "pack"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, last := range []bool{false, true} {
		for _, f := range packs {
			if strings.HasSuffix(f.Name(), ".idx") != last {
				continue
			}
			if err := os.Rename(filepath.Join(q, "pack", f.Name()), filepath.Join(objects, "pack", f.Name())); err != nil {
				return err
			}
		}
	}
	return syncDir(filepath.Join(objects, "pack"))
}

// diskReserve refuses when writing need more bytes under path would leave
// its filesystem with less than reserve bytes free (statfs, as the
// service account sees it: f_bavail).
func diskReserve(path string, need, reserve int64) error {
	if reserve <= 0 {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return protocol.Errorf(protocol.CodeInternal, "statfs: %w", err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free-need < reserve {
		return protocol.Errorf(protocol.CodeLimitExceeded, "disk reserve: %d bytes free, %d needed, %d kept in reserve", free, need, reserve)
	}
	return nil
}
