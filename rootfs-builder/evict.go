package rootfs

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// cacheEntryName is what BuildCached names an entry: NAME-KEY.
var cacheEntryName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*-[0-9a-f]{64}$`)

// EvictOptions says which cache entries Evict must keep.
type EvictOptions struct {
	// Keep is how many of the most recently built or served entries are
	// kept whatever else holds (an entry's ctime is its build; BuildCached
	// stamps each hit in .NAME-KEY.used beside it): a tree a test bed or a
	// second launcher configuration uses without naming it in Configs
	// survives a re-install.
	Keep int
	// Configs are launcher configuration files; every rootfs they name
	// (rootfs and rootfses[*].path) is kept. One that cannot be read or
	// decoded aborts the eviction before anything is removed.
	Configs []string
	// Referenced are further paths to keep.
	Referenced []string
	// DryRun reports what would be evicted and removes nothing.
	DryRun bool
}

// EvictResult lists the cache entries Evict removed and those it kept, with
// why (referenced, newest, mounted).
type EvictResult struct {
	Evicted []string
	Kept    map[string]string
}

// ConfigRootfsPaths returns the rootfs paths a launcher configuration names:
// its default "rootfs" and every "rootfses" entry's "path". Other fields are
// the launcher's business and are ignored; the two read here must be
// absolute and clean, as the launcher requires.
func ConfigRootfsPaths(data []byte) ([]string, error) {
	if err := protocol.CheckShape(data, protocol.Limits{MaxDepth: 4, MaxNodes: 512}); err != nil {
		return nil, fmt.Errorf("%w: launcher config: %v", ErrEvict, err)
	}
	var c struct {
		Rootfs   string `json:"rootfs"`
		Rootfses map[string]struct {
			Path string `json:"path"`
		} `json:"rootfses"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%w: launcher config: %v", ErrEvict, err)
	}
	var paths []string
	if c.Rootfs != "" {
		paths = append(paths, c.Rootfs)
	}
	for _, r := range c.Rootfses {
		paths = append(paths, r.Path)
	}
	for _, p := range paths {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return nil, fmt.Errorf("%w: launcher config names rootfs %q, not an absolute clean path", ErrEvict, p)
		}
	}
	sort.Strings(paths)
	return paths, nil
}

type devIno struct{ dev, ino uint64 }

// Evict removes the entries of cacheDir (direct children named NAME-KEY, as
// BuildCached makes them) that are neither referenced (by opts.Configs or
// opts.Referenced, by path or by inode), among the opts.Keep newest, nor
// mounted in any mount namespace (a live domain's root is a bind of its
// rootfs). It touches nothing else: not a symlink (never followed, never
// removed), not a file, not a name of another shape, not a .build-*
// directory of a build in progress. An entry is first renamed to a
// .evict-* name inside cacheDir, so a concurrent BuildCached sees it
// whole or not at all, then removed without following symlinks.
// Running it again is a no-op.
func Evict(cacheDir string, opts EvictOptions) (EvictResult, error) {
	res := EvictResult{Kept: map[string]string{}}
	if !filepath.IsAbs(cacheDir) || filepath.Clean(cacheDir) != cacheDir || cacheDir == "/" {
		return res, fmt.Errorf("%w: cache %q is not an absolute clean path other than /", ErrEvict, cacheDir)
	}
	if opts.Keep < 0 {
		return res, fmt.Errorf("%w: keep %d is negative", ErrEvict, opts.Keep)
	}
	st, err := os.Lstat(cacheDir)
	if err != nil || !st.IsDir() {
		return res, fmt.Errorf("%w: cache %s is not a directory (symlinks are not followed): %v", ErrEvict, cacheDir, err)
	}
	keepPaths := map[string]bool{}
	keepIDs := map[devIno]bool{}
	refs := append([]string(nil), opts.Referenced...)
	for _, c := range opts.Configs {
		b, err := os.ReadFile(c)
		if err != nil {
			return res, fmt.Errorf("%w: launcher config: %v", ErrEvict, err)
		}
		paths, err := ConfigRootfsPaths(b)
		if err != nil {
			return res, fmt.Errorf("%s: %w", c, err)
		}
		refs = append(refs, paths...)
	}
	for _, r := range refs {
		keepPaths[filepath.Clean(r)] = true
		// By inode too, so a reference through another path to the same
		// tree (a symlinked /var/cache) still keeps it.
		if fi, err := os.Stat(r); err == nil {
			if s, ok := fi.Sys().(*syscall.Stat_t); ok {
				keepIDs[devIno{uint64(s.Dev), s.Ino}] = true
			}
		}
	}

	type entry struct {
		name string
		id   devIno
		used int64 // last built or served, ns
	}
	des, err := os.ReadDir(cacheDir)
	if err != nil {
		return res, fmt.Errorf("%w: %v", ErrEvict, err)
	}
	var entries []entry
	for _, de := range des {
		if strings.HasPrefix(de.Name(), ".evict-") && de.IsDir() && !opts.DryRun {
			// Left by an interrupted eviction: already out of the cache.
			if err := os.RemoveAll(filepath.Join(cacheDir, de.Name())); err != nil {
				return res, fmt.Errorf("%w: %v", ErrEvict, err)
			}
			continue
		}
		if !cacheEntryName.MatchString(de.Name()) || de.Type()&fs.ModeType != fs.ModeDir {
			continue // not ours to judge: symlinks included, never followed
		}
		fi, err := os.Lstat(filepath.Join(cacheDir, de.Name()))
		if err != nil {
			return res, fmt.Errorf("%w: %v", ErrEvict, err)
		}
		s, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || !fi.IsDir() {
			continue
		}
		used := s.Ctim.Nano() // built (renamed into place)
		if u, err := os.Lstat(usedStamp(filepath.Join(cacheDir, de.Name()))); err == nil && u.Mode().IsRegular() && u.ModTime().UnixNano() > used {
			used = u.ModTime().UnixNano()
		}
		entries = append(entries, entry{de.Name(), devIno{uint64(s.Dev), s.Ino}, used})
	}
	// Newest first; the name breaks ties so the order is total.
	sort.Slice(entries, func(i, j int) bool {
		if entries[i].used != entries[j].used {
			return entries[i].used > entries[j].used
		}
		return entries[i].name < entries[j].name
	})
	mounted, err := mountedUnder(cacheDir)
	if err != nil {
		return res, fmt.Errorf("%w: listing mounts: %v", ErrEvict, err)
	}
	for i, e := range entries {
		p := filepath.Join(cacheDir, e.name)
		switch {
		case keepPaths[p] || keepIDs[e.id]:
			res.Kept[p] = "referenced"
		case i < opts.Keep:
			res.Kept[p] = "newest"
		case mounted[e.name]:
			res.Kept[p] = "mounted"
		default:
			res.Evicted = append(res.Evicted, p)
		}
	}
	if opts.DryRun {
		return res, nil
	}
	for _, p := range res.Evicted {
		tmp, err := os.MkdirTemp(cacheDir, ".evict-")
		if err != nil {
			return res, fmt.Errorf("%w: %v", ErrEvict, err)
		}
		// rename(2) replaces an empty directory atomically (os.Rename
		// refuses to); a symlink swapped in for p would fail (ENOTDIR).
		if err := syscall.Rename(p, tmp); err != nil {
			os.Remove(tmp)
			return res, fmt.Errorf("%w: %v", ErrEvict, err)
		}
		if err := os.RemoveAll(tmp); err != nil {
			return res, fmt.Errorf("%w: %v", ErrEvict, err)
		}
		// Removes a symlink in its place, never its target.
		if err := os.Remove(usedStamp(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return res, fmt.Errorf("%w: %v", ErrEvict, err)
		}
	}
	return res, nil
}

// mountedUnder returns the names of cacheDir's children that are, or hold,
// the source of a mount in some mount namespace of a running process. A
// bind mount's source shows as the mountinfo root field: the path inside
// its filesystem, which is cacheDir's own filesystem path plus the name.
func mountedUnder(cacheDir string) (map[string]bool, error) {
	real, err := filepath.EvalSymlinks(cacheDir)
	if err != nil {
		return nil, err
	}
	// Where cacheDir sits: the deepest mount containing it, from our own
	// namespace's mountinfo.
	var devID, fsPath string
	best := -1
	if err := scanMountinfo("/proc/self/mountinfo", func(id, root, point string) {
		rel, ok := strings.CutPrefix(real, point)
		// The last of stacked mounts on one point is the visible one.
		if !ok || (rel != "" && !strings.HasPrefix(rel, "/") && point != "/") || len(point) < best {
			return
		}
		if point == "/" {
			rel = real
		}
		best, devID, fsPath = len(point), id, filepath.Join(root, rel)
	}); err != nil {
		return nil, err
	}
	if best < 0 {
		return nil, errors.New("no mount holds " + real)
	}
	prefix := strings.TrimSuffix(fsPath, "/") + "/"
	mounted := map[string]bool{}
	seen := map[string]bool{}
	pids, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, p := range pids {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		ns, err := os.Readlink("/proc/" + p.Name() + "/ns/mnt")
		if err != nil || seen[ns] {
			continue // gone, or a namespace already read
		}
		seen[ns] = true
		// A process that exits mid-scan leaves no mounts to protect.
		scanMountinfo("/proc/"+p.Name()+"/mountinfo", func(id, root, _ string) {
			if id != devID {
				return
			}
			if rel, ok := strings.CutPrefix(root, prefix); ok {
				mounted[strings.SplitN(rel, "/", 2)[0]] = true
			}
		})
	}
	return mounted, nil
}

// scanMountinfo calls f with each line's major:minor, root and mount point
// (octal escapes undone).
func scanMountinfo(file string, f func(id, root, point string)) error {
	fh, err := os.Open(file)
	if err != nil {
		return err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		f(fields[2], unescapeMountinfo(fields[3]), unescapeMountinfo(fields[4]))
	}
	return sc.Err()
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
