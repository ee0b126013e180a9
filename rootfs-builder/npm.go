package rootfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
)

// NPM declares pinned npm packages installed at build time, and the files
// taken out of the install into the rootfs. Only the named files enter the
// rootfs (with their ELF closure, like --add); node_modules itself does not.
type NPM struct {
	Packages []NPMPackage `json:"packages"`
	Files    []NPMFile    `json:"files"`
}

// NPMPackage is one pinned package: an exact version, never a range (on an
// old Node, npm silently picks an old release for a range).
type NPMPackage struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// NPMFile copies From (a path below node_modules, e.g.
// "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex") to
// the rootfs path To.
type NPMFile struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Package is one installed npm package as the manifest records it; Integrity
// is npm's (the lock file's Subresource Integrity digest of the tarball).
type Package struct {
	Integrity string `json:"integrity"`
	Name      string `json:"name"`
	Version   string `json:"version"`
}

// DefaultNPMCache holds finished installs, one directory per content key.
const DefaultNPMCache = "/var/cache/autonomic/npm"

// npmUID is the account npm runs as when the builder is root: npm and the
// registry's bytes never run or land with root's authority.
const npmUID = 65534

var (
	npmNameRE = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*$`)
	// exactVersionRE is SemVer 2.0 without build metadata: no ranges, tags
	// or "latest".
	exactVersionRE = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)
	integrityRE    = regexp.MustCompile(`^sha512-[A-Za-z0-9+/]{86}==$`)
)

func (n *NPM) validate() error {
	if len(n.Packages) == 0 {
		return errors.New("packages is empty")
	}
	seen := map[string]bool{}
	for i, p := range n.Packages {
		if len(p.Name) > 214 || !npmNameRE.MatchString(p.Name) {
			return fmt.Errorf("packages[%d]: %q is not an npm package name", i, p.Name)
		}
		if !exactVersionRE.MatchString(p.Version) {
			return fmt.Errorf("packages[%d]: version %q is not an exact version", i, p.Version)
		}
		if seen[p.Name] {
			return fmt.Errorf("packages[%d]: %s listed twice", i, p.Name)
		}
		seen[p.Name] = true
	}
	if len(n.Files) == 0 {
		return errors.New("files is empty: name what the rootfs takes from the install")
	}
	dests := map[string]bool{}
	for i, f := range n.Files {
		if f.From == "" || path.IsAbs(f.From) || path.Clean(f.From) != f.From || f.From == "." ||
			f.From == ".." || strings.HasPrefix(f.From, "../") || strings.ContainsRune(f.From, 0) {
			return fmt.Errorf("files[%d]: from %q must be a clean path below node_modules", i, f.From)
		}
		if err := checkAbs(f.To); err != nil || f.To == "/" {
			return fmt.Errorf("files[%d]: to %q must be an absolute clean file path", i, f.To)
		}
		if dests[f.To] {
			return fmt.Errorf("files[%d]: %s named twice", i, f.To)
		}
		dests[f.To] = true
	}
	return nil
}

// key is the install's content address: the pinned set and the platform.
func (n *NPM) key() string {
	lines := []string{"autonomic-npm-install-v1", "os=linux cpu=x64"}
	for _, p := range n.Packages {
		lines = append(lines, p.Name+"@"+p.Version)
	}
	sort.Strings(lines[2:])
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:])
}

// installNPM returns a finished install of n's packages (from the cache when
// present) and the packages its lock file records. A fresh install runs
// `npm install --ignore-scripts` as nobody (when root) in a private
// temporary directory, is made root-owned and read-only to others, and only
// then renamed into the cache: a half-written or nobody-writable install is
// never reused.
func installNPM(ctx context.Context, n *NPM, opts Options) (string, []Package, error) {
	cache := opts.NPMCache
	if cache == "" {
		cache = DefaultNPMCache
	}
	final := filepath.Join(cache, n.key())
	if _, err := os.Lstat(filepath.Join(final, "package-lock.json")); err == nil {
		pkgs, err := readNPMLock(final, n)
		if err == nil && opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "rootfs: npm install cached at %s\n", final)
		}
		return final, pkgs, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", nil, fmt.Errorf("%w: npm cache: %v", ErrNPM, err)
	}
	tmp, err := os.MkdirTemp(cache, ".install-")
	if err != nil {
		return "", nil, fmt.Errorf("%w: npm cache: %v", ErrNPM, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	deps := map[string]string{}
	for _, p := range n.Packages {
		deps[p.Name] = p.Version
	}
	pj, _ := json.Marshal(map[string]any{"name": "autonomic-rootfs-npm", "version": "0.0.0", "private": true, "dependencies": deps})
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), pj, 0o644); err != nil {
		return "", nil, err
	}
	home := filepath.Join(tmp, ".home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return "", nil, err
	}
	npmCmd := opts.NPMCommand
	if npmCmd == "" {
		npmCmd = "npm"
	}
	cmd := exec.CommandContext(ctx, npmCmd, "install", "--ignore-scripts", "--no-audit", "--no-fund",
		"--omit=dev", "--os=linux", "--cpu=x64", "--prefix", tmp, "--cache", filepath.Join(home, "npm-cache"))
	cmd.Dir = tmp
	cmd.Env = npmEnv(home)
	cmd.Stdin = nil
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if os.Geteuid() == 0 {
		for _, d := range []string{tmp, home, filepath.Join(tmp, "package.json")} {
			if err := os.Chown(d, npmUID, npmUID); err != nil {
				return "", nil, err
			}
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: npmUID, Gid: npmUID, Groups: []uint32{}}
	}
	if opts.Progress != nil {
		fmt.Fprintf(opts.Progress, "rootfs: npm install --ignore-scripts %s\n", strings.Join(pinned(n), " "))
	}
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return "", nil, fmt.Errorf("%w: %v\n%s", ErrNPM, err, out.String())
	}
	if opts.Progress != nil {
		fmt.Fprintf(opts.Progress, "rootfs: npm install took %s\n", time.Since(start).Round(time.Millisecond))
	}
	if err := os.RemoveAll(home); err != nil { // the tarball cache: not part of the install
		return "", nil, err
	}
	pkgs, err := readNPMLock(tmp, n)
	if err != nil {
		return "", nil, err
	}
	if err := sealTree(tmp); err != nil {
		return "", nil, fmt.Errorf("%w: sealing install: %v", ErrNPM, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Lstat(filepath.Join(final, "package-lock.json")); serr != nil {
			return "", nil, fmt.Errorf("%w: %v", ErrNPM, err)
		}
		// A concurrent build finished the same key first: use its copy.
	}
	return final, pkgs, nil
}

func pinned(n *NPM) []string {
	var s []string
	for _, p := range n.Packages {
		s = append(s, p.Name+"@"+p.Version)
	}
	return s
}

// npmEnv passes npm what it needs to reach the registry (proxy, CA and
// registry settings) and nothing else of the builder's environment; HOME is
// private so no user .npmrc (and its tokens) is read.
func npmEnv(home string) []string {
	env := []string{"HOME=" + home, "npm_config_update_notifier=false"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "PATH", "LANG", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR",
			"NPM_CONFIG_REGISTRY", "NPM_CONFIG_CAFILE", "NPM_CONFIG_PROXY", "NPM_CONFIG_HTTPS_PROXY", "NPM_CONFIG_NOPROXY", "NPM_CONFIG_STRICT_SSL":
			env = append(env, kv)
		}
	}
	return env
}

// readNPMLock reads dir/package-lock.json: every pinned package must have
// resolved to exactly its pinned version, and every installed package must
// carry a sha512 integrity. It returns the installed packages sorted by
// name, version.
func readNPMLock(dir string, n *NPM) ([]Package, error) {
	data, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNPM, err)
	}
	var lock struct {
		Packages map[string]struct {
			Name      string `json:"name"`
			Version   string `json:"version"`
			Integrity string `json:"integrity"`
			Link      bool   `json:"link"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(data, &lock); err != nil {
		return nil, fmt.Errorf("%w: package-lock.json: %v", ErrNPM, err)
	}
	for _, p := range n.Packages {
		e, ok := lock.Packages["node_modules/"+p.Name]
		if !ok {
			return nil, fmt.Errorf("%w: %s is not in the lock file", ErrNPM, p.Name)
		}
		if e.Version != p.Version {
			return nil, fmt.Errorf("%w: %s resolved to %s, pinned %s", ErrNPM, p.Name, e.Version, p.Version)
		}
	}
	seen := map[Package]bool{}
	var out []Package
	for k, e := range lock.Packages {
		if k == "" {
			continue
		}
		// The lock lists every platform's optional package; only those
		// installed here were fetched and checked.
		if !strings.HasPrefix(k, "node_modules/") || strings.Contains("/"+k+"/", "/../") {
			return nil, fmt.Errorf("%w: lock file entry %q", ErrNPM, k)
		}
		if _, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(k), "package.json")); err != nil {
			continue
		}
		name := e.Name
		if name == "" {
			i := strings.LastIndex(k, "node_modules/")
			name = k[i+len("node_modules/"):]
		}
		if e.Link || !integrityRE.MatchString(e.Integrity) {
			return nil, fmt.Errorf("%w: %s has no sha512 integrity in the lock file", ErrNPM, k)
		}
		p := Package{Name: name, Version: e.Version, Integrity: e.Integrity}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sortPackages(out)
	return out, nil
}

func sortPackages(p []Package) {
	sort.Slice(p, func(i, j int) bool {
		if p[i].Name != p[j].Name {
			return p[i].Name < p[j].Name
		}
		return p[i].Version < p[j].Version
	})
}

// sealTree makes a finished install root-owned (when root) and unwritable by
// anyone else, so the account npm ran as cannot change it afterwards.
func sealTree(dir string) error {
	root := os.Geteuid() == 0
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if root {
			if err := os.Lchown(p, 0, 0); err != nil {
				return err
			}
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(p, fi.Mode().Perm()&^0o022)
	})
}

// addNPMFile places one file of the install in the rootfs, like --add. The
// source must stay inside node_modules after resolving symlinks.
func (p *planner) addNPMFile(install string, f NPMFile) error {
	modules := filepath.Join(install, "node_modules")
	src := filepath.Join(modules, filepath.FromSlash(f.From))
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		return fmt.Errorf("%w: npm file %s: %v", ErrMissing, f.From, err)
	}
	if !strings.HasPrefix(real, modules+string(filepath.Separator)) {
		return fmt.Errorf("%w: npm file %s resolves outside node_modules", ErrSpec, f.From)
	}
	return p.addExtra(Add{Src: real, Dest: f.To})
}

// tailBuffer keeps the last 8 KiB of npm's output for the error message.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 8<<10 {
		t.b = t.b[len(t.b)-8<<10:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(bytes.TrimSpace(t.b)) }

var _ io.Writer = (*tailBuffer)(nil)
