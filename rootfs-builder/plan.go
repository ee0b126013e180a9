package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

type kind int

const (
	kindDir kind = iota
	kindFile
	kindSymlink
)

func (k kind) String() string {
	switch k {
	case kindDir:
		return "dir"
	case kindFile:
		return "file"
	default:
		return "symlink"
	}
}

// node is one planned rootfs path. Paths are absolute inside the rootfs and
// equal to the host path they were copied from, except for --add files.
type node struct {
	kind   kind
	mode   fs.FileMode // permission bits plus sticky; never setuid/setgid
	src    string      // host file (symlink-free) for kindFile from the host
	data   []byte      // generated content for kindFile when src == ""
	target string      // kindSymlink
	// synthetic dirs were made by the builder; a host dir at the same path
	// replaces their mode.
	synthetic bool
	// reserved paths belong to the builder (mountpoints, generated /etc
	// files); no source may write them.
	reserved bool
}

// mountpoints are created empty, 0755, for the launcher to mount over.
func mountpoints() []string { return []string{"/proc", "/dev", "/tmp", "/run", "/workspace"} }

// maxSymlinkHops matches the kernel's MAXSYMLINKS.
const maxSymlinkHops = 40

// planner computes the full set of nodes before anything is written, so a
// denied or missing path aborts the build before the first byte lands.
type planner struct {
	ctx     context.Context
	nodes   map[string]*node
	libDirs []string
	notes   []string
	elfDone map[string]bool
	// pendingLinks are symlink targets met inside directory walks; they are
	// resolved after every entry so a link to a sibling tree finds it planned.
	pendingLinks []string
	// env: an environment's tree is the base (envProvides).
	env bool
}

func newPlanner(ctx context.Context, libDirs []string) *planner {
	p := &planner{
		ctx:     ctx,
		nodes:   map[string]*node{"/": {kind: kindDir, mode: 0o755, synthetic: true, reserved: true}},
		libDirs: libDirs,
		elfDone: map[string]bool{},
	}
	for _, m := range mountpoints() {
		p.nodes[m] = &node{kind: kindDir, mode: 0o755, synthetic: true, reserved: true}
	}
	p.nodes["/etc"] = &node{kind: kindDir, mode: 0o755, synthetic: true}
	for name, content := range generatedEtc() {
		p.nodes[name] = &node{kind: kindFile, mode: 0o644, data: []byte(content), reserved: true}
	}
	return p
}

// generatedEtc is the identity the domain sees: root, the worker (1000,
// home /workspace) and nobody. nsswitch.conf pins lookups to these files so
// nothing in the domain tries NSS modules or DNS.
func generatedEtc() map[string]string {
	return map[string]string{
		"/etc/passwd": "root:x:0:0:root:/:/bin/sh\n" +
			"worker:x:1000:1000:worker:/workspace:/bin/sh\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"/etc/group": "root:x:0:\n" +
			"worker:x:1000:\n" +
			"nogroup:x:65534:\n",
		"/etc/hosts":         "127.0.0.1\tlocalhost\n::1\tlocalhost\n",
		"/etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files\n",
	}
}

func (p *planner) notef(format string, a ...any) {
	p.notes = append(p.notes, fmt.Sprintf(format, a...))
}

// checkPath applies the path rules every rootfs path obeys.
func checkPath(rp string) error {
	if why := Denied(rp); why != "" {
		return deniedErr(rp, why)
	}
	if !utf8.ValidString(rp) || strings.ContainsAny(rp, "\x00\n") {
		return fmt.Errorf("%w: path %q is not representable in the manifest", ErrSpec, rp)
	}
	for _, m := range mountpoints() {
		if strings.HasPrefix(rp, m+"/") {
			return fmt.Errorf("%w: %s is beneath mountpoint %s, which stays empty", ErrConflict, rp, m)
		}
	}
	if rp == "/"+ManifestName {
		return fmt.Errorf("%w: %s is the manifest's own path", ErrConflict, rp)
	}
	return nil
}

func (p *planner) put(rp string, n *node) error {
	if err := checkPath(rp); err != nil {
		return err
	}
	old, ok := p.nodes[rp]
	if !ok {
		p.nodes[rp] = n
		return nil
	}
	if old.reserved && !(old.kind == kindDir && n.kind == kindDir && rp == "/") {
		return fmt.Errorf("%w: %s is reserved by the builder", ErrConflict, rp)
	}
	switch {
	case old.kind != n.kind:
		return fmt.Errorf("%w: %s is both a %s and a %s", ErrConflict, rp, old.kind, n.kind)
	case n.kind == kindDir:
		if old.synthetic && !n.synthetic {
			old.mode, old.synthetic = n.mode, false
		}
		return nil
	case n.kind == kindSymlink && old.target != n.target:
		return fmt.Errorf("%w: symlink %s -> %q and -> %q", ErrConflict, rp, old.target, n.target)
	case n.kind == kindFile && (old.src != n.src || old.src == ""):
		return fmt.Errorf("%w: file %s from two sources", ErrConflict, rp)
	}
	return nil
}

// keepMode drops setuid/setgid: the rootfs is mounted nosuid, and a setuid
// bit that only the mount option disarms is one mistake away from working.
func keepMode(m fs.FileMode) fs.FileMode { return m & (fs.ModePerm | fs.ModeSticky) }

// follow resolves a host path component by component, recording every
// directory and symlink it traverses so the same path resolves the same way
// inside the rootfs (Debian's merged /usr: /lib64 -> usr/lib64, ...). It
// returns the symlink-free host path and its Lstat.
func (p *planner) follow(hostPath string) (string, fs.FileInfo, error) {
	// The literal name first: a denied path is refused as denied, whatever
	// else might be wrong with it.
	if why := Denied(hostPath); why != "" {
		return "", nil, deniedErr(hostPath, why)
	}
	cur := "/"
	rest := splitPath(hostPath)
	hops := 0
	var fi fs.FileInfo
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur) // cur is symlink-free, so this is the kernel's ".."
			continue
		}
		next := path.Join(cur, name)
		if why := Denied(next); why != "" {
			return "", nil, deniedErr(next, why)
		}
		st, err := os.Lstat(next)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", nil, fmt.Errorf("%w: %s", ErrMissing, next)
			}
			return "", nil, err
		}
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			if hops++; hops > maxSymlinkHops {
				return "", nil, fmt.Errorf("%w: too many symlinks resolving %s", ErrSpec, hostPath)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", nil, err
			}
			if err := p.put(next, &node{kind: kindSymlink, mode: 0o777, target: target}); err != nil {
				return "", nil, err
			}
			if path.IsAbs(target) {
				cur = "/"
			}
			rest = append(splitPath(target), rest...)
		case st.IsDir():
			if err := p.put(next, &node{kind: kindDir, mode: keepMode(st.Mode())}); err != nil {
				return "", nil, err
			}
			cur = next
		default:
			if len(rest) > 0 {
				return "", nil, fmt.Errorf("%w: %s is not a directory", ErrSpec, next)
			}
			cur = next
		}
		fi = st
	}
	if fi == nil {
		return "", nil, fmt.Errorf("%w: %s names the root", ErrSpec, hostPath)
	}
	return cur, fi, nil
}

func splitPath(p string) []string {
	return strings.Split(strings.Trim(p, "/"), "/")
}

func (p *planner) addFile(real string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", ErrSpec, real)
	}
	if needsContentCheck(real) {
		// Fail before copying anything; the copy checks the bytes again.
		if err := checkKeyFile(real); err != nil {
			return err
		}
	}
	return p.put(real, &node{kind: kindFile, mode: keepMode(fi.Mode()), src: real})
}

// optionalMissing turns a missing optional entry into a note.
func (p *planner) optionalMissing(err error, optional bool, what string) error {
	if optional && errors.Is(err, ErrMissing) {
		p.notef("skipped optional %s: %v", what, err)
		return nil
	}
	return err
}

func (p *planner) addSpec(s *Spec) error {
	for _, e := range s.Executables {
		if err := p.optionalMissing(p.addExecutable(e.Path), e.Optional, "executable "+e.Path); err != nil {
			return err
		}
	}
	for _, e := range s.Files {
		err := func() error {
			real, fi, err := p.follow(e.Path)
			if err != nil {
				return err
			}
			if err := p.addFile(real, fi); err != nil {
				return err
			}
			return p.closure(real, false, nil)
		}()
		if err := p.optionalMissing(err, e.Optional, "file "+e.Path); err != nil {
			return err
		}
	}
	for _, d := range s.Directories {
		err := func() error {
			real, fi, err := p.follow(d.Path)
			if err != nil {
				return err
			}
			if !fi.IsDir() {
				return fmt.Errorf("%w: %s is not a directory", ErrSpec, d.Path)
			}
			return p.walk(real, real, d.Exclude)
		}()
		if err := p.optionalMissing(err, d.Optional, "directory "+d.Path); err != nil {
			return err
		}
	}
	for _, l := range s.Symlinks {
		if err := p.putUnderPlan(l.Path, &node{kind: kindSymlink, mode: 0o777, target: l.Target}); err != nil {
			return err
		}
	}
	return p.resolvePendingLinks()
}

// addExecutable adds an executable, its ELF closure and, for a script, its
// interpreter; anything it needs and cannot find is an error.
func (p *planner) addExecutable(hostPath string) error {
	real, fi, err := p.follow(hostPath)
	if err != nil {
		return err
	}
	if fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%w: %s is not executable", ErrSpec, hostPath)
	}
	if err := p.addFile(real, fi); err != nil {
		return err
	}
	interp, err := shebang(real)
	if err != nil {
		return err
	}
	if interp != "" {
		if err := p.addExecutable(interp); err != nil {
			return fmt.Errorf("interpreter of %s: %w", hostPath, err)
		}
		return nil
	}
	return p.closure(real, true, nil)
}

func shebang(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := f.Read(buf)
	buf = buf[:n]
	if !strings.HasPrefix(string(buf), "#!") {
		return "", nil
	}
	line, _, _ := strings.Cut(string(buf[2:]), "\n")
	fields := strings.Fields(line)
	if len(fields) == 0 || !path.IsAbs(fields[0]) {
		return "", fmt.Errorf("%w: %s has an unusable #! line", ErrSpec, file)
	}
	return path.Clean(fields[0]), nil
}

// walk copies a host directory tree in sorted order. ELF objects inside get
// their closure resolved leniently (a plugin's missing library is a note, not
// a failed build); symlinks are kept and their targets resolved afterwards.
func (p *planner) walk(root, dir string, exclude []string) error {
	if err := p.ctx.Err(); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return err
	}
	for _, de := range ents {
		full := path.Join(dir, de.Name())
		rel := strings.TrimPrefix(full, root+"/")
		if excluded(rel, de.Name(), exclude) {
			continue
		}
		if why := Denied(full); why != "" {
			return deniedErr(full, why)
		}
		fi, err := os.Lstat(full)
		if err != nil {
			return err
		}
		switch m := fi.Mode(); {
		case m.IsDir():
			if err := p.put(full, &node{kind: kindDir, mode: keepMode(m)}); err != nil {
				return err
			}
			if err := p.walk(root, full, exclude); err != nil {
				return err
			}
		case m&fs.ModeSymlink != 0:
			target, err := os.Readlink(full)
			if err != nil {
				return err
			}
			if err := p.put(full, &node{kind: kindSymlink, mode: 0o777, target: target}); err != nil {
				return err
			}
			if !path.IsAbs(target) {
				// Not path.Join: "..", after a symlinked component, is for
				// follow to resolve the way the kernel does.
				target = dir + "/" + target
			}
			p.pendingLinks = append(p.pendingLinks, target)
		case m.IsRegular():
			if err := p.addFile(full, fi); err != nil {
				return err
			}
			if m&0o111 != 0 || strings.Contains(de.Name(), ".so") {
				if err := p.closure(full, false, nil); err != nil {
					return err
				}
			}
		default:
			// Device nodes, FIFOs and sockets never enter a rootfs: /dev is
			// the launcher's to populate.
			p.notef("skipped %s: %s is not a file, directory or symlink", full, m.Type())
		}
	}
	return nil
}

func excluded(rel, base string, patterns []string) bool {
	for _, pat := range patterns {
		if anchored, ok := strings.CutPrefix(pat, "/"); ok {
			if m, _ := path.Match(anchored, rel); m {
				return true
			}
		} else if m, _ := path.Match(pat, base); m {
			return true
		}
	}
	return false
}

// resolvePendingLinks makes symlinks met in walks point at something: a file
// target is added (with its closure); a directory target outside the walked
// trees is added empty rather than copied wholesale, so a stray link to "/"
// cannot pull in the host; a dangling target is a note.
func (p *planner) resolvePendingLinks() error {
	for len(p.pendingLinks) > 0 {
		t := p.pendingLinks[0]
		p.pendingLinks = p.pendingLinks[1:]
		real, fi, err := p.follow(t)
		if errors.Is(err, ErrMissing) {
			p.notef("dangling symlink target %s kept as is", t)
			continue
		}
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			if _, ok := p.nodes[real]; !ok || !p.walkedInto(real) {
				p.notef("symlink target directory %s added without its contents", real)
			}
		case fi.Mode().IsRegular():
			if err := p.addFile(real, fi); err != nil {
				return err
			}
			if err := p.closure(real, false, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// walkedInto reports whether some planned path lies beneath dir.
func (p *planner) walkedInto(dir string) bool {
	for k := range p.nodes {
		if strings.HasPrefix(k, dir+"/") {
			return true
		}
	}
	return false
}

// putUnderPlan places a node at a rootfs path that need not exist on the
// host, resolving parents through symlinks already planned (so "/bin/x"
// lands in usr/bin when /bin -> usr/bin) and creating missing parents 0755.
func (p *planner) putUnderPlan(rp string, n *node) error {
	if why := Denied(rp); why != "" {
		return deniedErr(rp, why)
	}
	rest := splitPath(rp)
	last := rest[len(rest)-1]
	rest = rest[:len(rest)-1]
	cur := "/"
	hops := 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, name)
		old, ok := p.nodes[next]
		switch {
		case !ok:
			if err := p.put(next, &node{kind: kindDir, mode: 0o755, synthetic: true}); err != nil {
				return err
			}
			cur = next
		case old.kind == kindDir:
			cur = next
		case old.kind == kindSymlink:
			if hops++; hops > maxSymlinkHops {
				return fmt.Errorf("%w: too many symlinks placing %s", ErrSpec, rp)
			}
			if path.IsAbs(old.target) {
				cur = "/"
			}
			rest = append(splitPath(old.target), rest...)
		default:
			return fmt.Errorf("%w: parent %s of %s is a file", ErrConflict, next, rp)
		}
	}
	return p.put(path.Join(cur, last), n)
}

// sortedPaths returns every planned path; byte order puts each directory
// before its contents.
func (p *planner) sortedPaths() []string {
	keys := make([]string, 0, len(p.nodes))
	for k := range p.nodes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// addExtra places an --add file: a host file copied to a chosen rootfs path.
func (p *planner) addExtra(a Add) error {
	if err := checkAbs(a.Dest); err != nil || a.Dest == "/" {
		return fmt.Errorf("%w: --add destination %q must be an absolute clean file path", ErrSpec, a.Dest)
	}
	src, err := filepath.Abs(a.Src)
	if err != nil {
		return fmt.Errorf("%w: --add source %q: %v", ErrSpec, a.Src, err)
	}
	if why := Denied(src); why != "" {
		return deniedErr(src, why)
	}
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		return fmt.Errorf("%w: --add source %s: %v", ErrMissing, src, err)
	}
	if why := Denied(real); why != "" {
		return deniedErr(real, why)
	}
	fi, err := os.Lstat(real)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: --add source %s is not a regular file", ErrSpec, src)
	}
	if err := p.putUnderPlan(a.Dest, &node{kind: kindFile, mode: keepMode(fi.Mode()), src: real}); err != nil {
		return err
	}
	// A dynamically linked client must bring its libraries.
	return p.closure(real, true, nil)
}
