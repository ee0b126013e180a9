package pgcluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
)

// Role names. The admin role owns the schema and runs migrations; the kernel
// role is what the running kernel connects as and is granted only what the
// migrations grant it (in particular, no UPDATE or DELETE on the ledger).
const (
	AdminRole  = "autonomic_admin"
	KernelRole = "autonomic_kernel"
)

// The socket's port number only names the socket file (.s.PGSQL.<port>);
// nothing listens on TCP.
const socketPort = 5432

// Account is the unprivileged OS account postgres runs as.
type Account struct {
	Name string
	UID  uint32
	GID  uint32
}

// ServiceAccount returns the account a root process should run the cluster
// as: the `autonomic` service account when it exists, otherwise `nobody`.
// It never creates an account.
func ServiceAccount() (Account, error) {
	for _, name := range []string{"autonomic", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return Account{Name: name, UID: uint32(uid), GID: uint32(gid)}, nil
	}
	return Account{}, errors.New("pgcluster: neither the autonomic nor the nobody account exists")
}

// Config describes one managed cluster.
type Config struct {
	// Dir is the cluster's state directory: data/, sock/, the role
	// secrets and the server log live beneath it. Created if missing.
	Dir string
	// BinDir overrides discovery of the PostgreSQL binaries.
	BinDir string
	// RunAs is the unprivileged account postgres runs as. Required when
	// the caller is root; must be nil or the caller's own account
	// otherwise (only root can switch accounts).
	RunAs *Account
	// NoSyncInit passes --no-sync to initdb. Only for throwaway test
	// clusters: it skips fsyncing the freshly created files, never the
	// server's own fsync, which stays on.
	NoSyncInit bool
	// StartTimeout bounds how long Start waits for the server to accept
	// connections (default 60s; crash recovery after kill -9 takes time).
	StartTimeout time.Duration
	Logger       hclog.Logger
}

// Cluster is a running (or stopped) managed cluster.
type Cluster struct {
	cfg      Config
	bin      string
	data     string
	sock     string
	adminPW  string
	kernelPW string
	cred     *syscall.Credential

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been reaped
	log  hclog.Logger
}

// FindBinDir locates the PostgreSQL server binaries: `pg_config --bindir`
// first, then the newest /usr/lib/postgresql/*/bin.
func FindBinDir() (string, error) {
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	globbed, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(globbed, func(i, j int) bool { return versionOf(globbed[i]) > versionOf(globbed[j]) })
	candidates = append(candidates, globbed...)
	for _, dir := range candidates {
		if isExecutable(filepath.Join(dir, "postgres")) && isExecutable(filepath.Join(dir, "initdb")) {
			return dir, nil
		}
	}
	return "", errors.New("pgcluster: no PostgreSQL server binaries found (pg_config --bindir, /usr/lib/postgresql/*/bin)")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// Start initialises the cluster on first use and starts it. It refuses to
// run postgres as root.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	if cfg.Dir == "" {
		return nil, errors.New("pgcluster: Config.Dir is required")
	}
	c := &Cluster{cfg: cfg, log: cfg.Logger.Named("pgcluster")}
	var err error
	if c.cred, err = credentialFor(cfg.RunAs); err != nil {
		return nil, err
	}
	if c.bin = cfg.BinDir; c.bin == "" {
		if c.bin, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	if err := c.checkVersion(ctx); err != nil {
		return nil, err
	}
	c.data = filepath.Join(cfg.Dir, "data")
	c.sock = filepath.Join(cfg.Dir, "sock")
	if err := c.prepareDirs(); err != nil {
		return nil, err
	}
	fresh := !fileExists(filepath.Join(c.data, "PG_VERSION"))
	if fresh {
		if err := c.initdb(ctx); err != nil {
			return nil, err
		}
	}
	if c.adminPW, err = c.secret("admin.pw", false); err != nil {
		return nil, err
	}
	if c.kernelPW, err = c.secret("kernel.pw", true); err != nil {
		return nil, err
	}
	if err := c.stopOrphan(); err != nil {
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	if err := c.ensureKernelRole(ctx); err != nil {
		_ = c.Stop(context.Background())
		return nil, err
	}
	return c, nil
}

// stopOrphan stops a postmaster that a crashed kernel left running on this
// data directory: the data is reused, the server is started afresh under
// this Cluster's control. Only a postgres whose command line names this very
// data directory is touched; a stale postmaster.pid (its pid dead or reused
// by another program) is left for postgres itself to discard.
func (c *Cluster) stopOrphan() error {
	b, err := os.ReadFile(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return nil
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 1 || !alive(pid) {
		return nil
	}
	exe, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
	cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if filepath.Base(exe) != "postgres" || !bytes.Contains(cmdline, []byte("\x00"+c.data+"\x00")) {
		return nil
	}
	c.log.Warn("stopping a postmaster left running by a previous kernel", "pid", pid)
	_ = syscall.Kill(pid, syscall.SIGINT) // fast shutdown: roll back, checkpoint, exit
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
			for _, k := range childrenOf(pid) {
				_ = syscall.Kill(k, syscall.SIGKILL)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline = time.Now().Add(10 * time.Second)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Backends exit with their postmaster; wait for the last one so the
	// shared memory block is free before the restart.
	for time.Now().Before(deadline) && len(childrenOf(pid)) > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// credentialFor decides which account postgres runs as. Root without an
// explicit unprivileged account is refused, like initdb refuses root: a
// database server running as root turns any server bug into host root.
func credentialFor(acct *Account) (*syscall.Credential, error) {
	euid := os.Geteuid()
	if acct == nil {
		if euid == 0 {
			return nil, errors.New("pgcluster: refusing to run postgres as root; configure an unprivileged account")
		}
		return nil, nil
	}
	if acct.UID == 0 {
		return nil, errors.New("pgcluster: refusing to run postgres as uid 0")
	}
	if euid == 0 {
		return &syscall.Credential{Uid: acct.UID, Gid: acct.GID, Groups: []uint32{}}, nil
	}
	if uint32(euid) != acct.UID {
		return nil, fmt.Errorf("pgcluster: cannot switch to account %q without root", acct.Name)
	}
	return nil, nil
}

func (c *Cluster) checkVersion(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, filepath.Join(c.bin, "postgres"), "--version").Output()
	if err != nil {
		return fmt.Errorf("pgcluster: postgres --version: %w", err)
	}
	// "postgres (PostgreSQL) 15.8 (Debian ...)"
	fields := strings.Fields(string(out))
	if len(fields) < 3 {
		return fmt.Errorf("pgcluster: unrecognised postgres version %q", strings.TrimSpace(string(out)))
	}
	major, _ := strconv.Atoi(strings.SplitN(fields[2], ".", 2)[0])
	if major < 15 {
		return fmt.Errorf("pgcluster: PostgreSQL %d is too old; 15 or newer is required", major)
	}
	return nil
}

func (c *Cluster) prepareDirs() error {
	for _, d := range []string{c.cfg.Dir, c.data, c.sock} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		// postgres refuses a data directory that is group- or
		// world-accessible, and a private socket directory is what keeps
		// other local users from even attempting to connect.
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		if c.cred != nil {
			if err := os.Chown(d, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
				return fmt.Errorf("pgcluster: %w", err)
			}
		}
	}
	return nil
}

// secret reads a role password from the state directory, creating it when
// create is true and it is missing. The files are 0600 and owned by the
// account that owns the cluster.
func (c *Cluster) secret(name string, create bool) (string, error) {
	path := filepath.Join(c.cfg.Dir, name)
	b, err := os.ReadFile(path)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, os.ErrNotExist) || !create {
		return "", fmt.Errorf("pgcluster: reading %s: %w", name, err)
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	pw := hex.EncodeToString(raw[:])
	if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("pgcluster: %w", err)
	}
	if c.cred != nil {
		if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return "", fmt.Errorf("pgcluster: %w", err)
		}
	}
	return pw, nil
}

func (c *Cluster) initdb(ctx context.Context) error {
	if _, err := c.secret("admin.pw", true); err != nil {
		return err
	}
	args := []string{
		"-D", c.data,
		"-U", AdminRole,
		"--pwfile=" + filepath.Join(c.cfg.Dir, "admin.pw"),
		// Password authentication even on the private socket: the kernel
		// role must not be able to log in as the admin role.
		"--auth-local=scram-sha-256",
		"--auth-host=reject",
		"-E", "UTF8",
		"--locale=C",
	}
	if c.cfg.NoSyncInit {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "initdb"), args...)
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/bin:/bin"}
	cmd.Dir = c.cfg.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pgcluster: initdb failed: %w: %s", err, lastLines(out.String(), 5))
	}
	c.log.Info("initialised cluster", "dir", c.cfg.Dir)
	return nil
}

func (c *Cluster) start(ctx context.Context) error {
	logf, err := os.OpenFile(filepath.Join(c.cfg.Dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(filepath.Join(c.bin, "postgres"),
		"-D", c.data,
		"-p", strconv.Itoa(socketPort),
		"-c", "listen_addresses=",
		"-c", "unix_socket_directories="+c.sock,
		"-c", "unix_socket_permissions=0700",
		// Durability is the point of the authority store: these are
		// forced on the command line so a stray postgresql.conf edit
		// cannot turn them off.
		"-c", "fsync=on",
		"-c", "synchronous_commit=on",
		"-c", "full_page_writes=on",
		"-c", "max_connections=200",
	)
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/bin:/bin"}
	cmd.Dir = c.cfg.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a signal meant for the test runner's
	// terminal group (^C) does not reach the server behind our back.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgcluster: starting postgres: %w", err)
	}
	c.cmd = cmd
	c.done = make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(c.done)

	deadline := time.Now().Add(c.cfg.StartTimeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(pctx, c.AdminConnString("postgres"))
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			c.log.Info("cluster accepting connections", "pid", cmd.Process.Pid)
			return nil
		}
		select {
		case <-c.done:
			return fmt.Errorf("pgcluster: postgres exited during start-up: %s", c.logTail())
		case <-ctx.Done():
			_ = c.Kill()
			return fmt.Errorf("pgcluster: start: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = c.Kill()
			return fmt.Errorf("pgcluster: postgres did not accept connections within %s: %v: %s", c.cfg.StartTimeout, err, c.logTail())
		}
	}
}

func (c *Cluster) ensureKernelRole(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.AdminConnString("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	defer conn.Close(context.Background())
	// The migrations create the role NOLOGIN when it is missing (so they
	// can run against any server); only the managed cluster gives it a
	// password, because only here do we own the secret's storage.
	_, err = conn.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '%[1]s') THEN CREATE ROLE %[1]s; END IF;
END $$; ALTER ROLE %[1]s LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD '%[2]s'`, KernelRole, c.kernelPW))
	if err != nil {
		return fmt.Errorf("pgcluster: creating kernel role: %w", err)
	}
	return nil
}

// Restart starts the cluster again after Stop or Kill, on the same data
// directory (crash recovery runs if it was killed).
func (c *Cluster) Restart(ctx context.Context) error {
	if c.running() {
		return errors.New("pgcluster: cluster is still running")
	}
	return c.start(ctx)
}

func (c *Cluster) running() bool {
	if c.done == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// PID is the postmaster's pid, or 0 when not running.
func (c *Cluster) PID() int {
	if !c.running() {
		return 0
	}
	return c.cmd.Process.Pid
}

// Stop shuts the cluster down with a fast shutdown (SIGINT: roll back open
// transactions, checkpoint, exit), falling back to Kill when ctx expires.
func (c *Cluster) Stop(ctx context.Context) error {
	if !c.running() {
		return nil
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return c.Kill()
	case <-time.After(30 * time.Second):
		return c.Kill()
	}
}

// Kill crashes the cluster the way a power cut or the OOM killer would:
// SIGKILL to the postmaster this Cluster started and to every child it had
// forked, then waits until none of them is alive. Backends call setsid(),
// so a process-group kill would miss them; they are found by parent pid
// while the postmaster is stopped and cannot fork more.
func (c *Cluster) Kill() error {
	if !c.running() {
		return nil
	}
	pid := c.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgcluster: stop: %w", err)
	}
	kids := childrenOf(pid)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgcluster: kill: %w", err)
	}
	<-c.done
	// Only once every backend is gone is the shared memory block free
	// for a restart.
	deadline := time.Now().Add(10 * time.Second)
	for _, k := range kids {
		for alive(k) {
			if time.Now().After(deadline) {
				return errors.New("pgcluster: postgres processes survived SIGKILL")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// childrenOf lists the pids whose parent is ppid.
func childrenOf(ppid int) []int {
	var out []int
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(pid); ok && st.ppid == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// alive reports whether pid exists and is not a zombie. Zombies are
// ignored: they hold no shared memory, and whether they are reaped depends
// on the host's init, not on us.
func alive(pid int) bool {
	st, ok := procStat(pid)
	return ok && st.state != "Z" && st.state != "X"
}

type stat struct {
	state string
	ppid  int
}

func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return stat{}, false
	}
	// comm may contain spaces and parentheses; fields resume after the
	// last ')': state, ppid, ...
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return stat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return stat{state: f[0], ppid: ppid}, true
}

// AdminConnString connects to database db as the admin role.
func (c *Cluster) AdminConnString(db string) string { return c.connString(AdminRole, c.adminPW, db) }

// KernelConnString connects to database db as the kernel role.
func (c *Cluster) KernelConnString(db string) string {
	return c.connString(KernelRole, c.kernelPW, db)
}

func (c *Cluster) connString(role, pw, db string) string {
	return fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s sslmode=disable",
		quote(c.sock), socketPort, role, quote(pw), quote(db))
}

// quote renders a libpq keyword/value string value.
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// CreateDatabase creates an empty database owned by the admin role.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.AdminConnString("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if err != nil {
		return fmt.Errorf("pgcluster: create database: %w", err)
	}
	return nil
}

func (c *Cluster) logTail() string {
	b, _ := os.ReadFile(filepath.Join(c.cfg.Dir, "postgres.log"))
	return lastLines(string(b), 5)
}

func lastLines(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
