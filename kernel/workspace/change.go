package workspace

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/zlib"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/protocol/pathglob"
)

// The harvest: a worker's change, read from the checkpoint archive of its
// overlay upper layer (the launcher's format: sorted entries, regular
// files with their bytes, symlinks by target text, whiteouts as 0/0
// character devices, opaque directories as a PAX xattr record) and turned
// into a git patch against the base OID. The archive is what a hostile
// worker wrote: it is parsed as data, in memory, under limits, and nothing
// in it is ever extracted, opened by path, followed or executed.

// MaxPatch is the largest patch a harvest makes: what the broker stores
// for a proposal the kernel makes (broker.MaxPayload); the lease's
// bytes_per_effect is the operator's own, lower, bound.
const MaxPatch = 4 << 20

// Limits bound what one harvest reads and produces.
type Limits struct {
	ArchiveBytes int64 // the whole archive (default 64 MiB)
	FileBytes    int64 // one regular file (default 4 MiB: a regenerated lock file)
	ChangeBytes  int64 // every regular file kept, together (default 8 MiB)
	Entries      int   // archive entries (default 100 000)
	PatchBytes   int   // the patch (default and most: MaxPatch)
}

func (l Limits) withDefaults() Limits {
	if l.ArchiveBytes <= 0 {
		l.ArchiveBytes = 64 << 20
	}
	if l.FileBytes <= 0 {
		l.FileBytes = 4 << 20
	}
	if l.ChangeBytes <= 0 {
		l.ChangeBytes = 8 << 20
	}
	if l.Entries <= 0 {
		l.Entries = 100_000
	}
	if l.PatchBytes <= 0 || l.PatchBytes > MaxPatch {
		l.PatchBytes = MaxPatch
	}
	return l
}

// Admit is what the target lets a change carry beyond plain text files.
type Admit struct {
	// Binary: a file with a NUL in it is harvested as a GIT binary patch
	// (the target's allow_binary; still under the patch cap and the
	// adapter's result cap) instead of refusing the change.
	Binary bool
	// Symlinks: a symlink whose text stays inside the repository
	// (pathglob.LinkInside) is harvested as one (mode 120000), and the
	// base's may change (the target's allow_symlinks); others still refuse
	// the change.
	Symlinks bool
}

// Refusal is a change the harvest will not carry: what the worker left
// breaks a rule (doc.go). Reason never quotes a worker-chosen name: it is
// what a worker may be told. Path, when one path broke the rule, is that
// path, for the operator's record only (Operator quotes it escaped).
type Refusal struct {
	Reason string
	Path   string
}

func (r *Refusal) Error() string { return "harvest refused: " + r.Reason }

// Operator is the refusal as the operator reads it: the reason and,
// escaped (strconv.QuoteToASCII: no control, format or bidi character of
// a worker-chosen name reaches a terminal), the path that broke it.
func (r *Refusal) Operator() string {
	if r.Path == "" {
		return r.Reason
	}
	return r.Reason + ": " + strconv.QuoteToASCII(r.Path)
}

func refuse(format string, args ...any) error { return &Refusal{Reason: fmt.Sprintf(format, args...)} }

// refusePath is refuse naming the path that broke the rule.
func refusePath(p, format string, args ...any) error {
	return &Refusal{Reason: fmt.Sprintf(format, args...), Path: p}
}

// ErrDigest: the archive's bytes are not the ones the digest names.
var ErrDigest = errors.New("workspace: checkpoint archive does not match its digest")

// upperFile is a regular file of the upper layer.
type upperFile struct {
	exec bool
	link bool // a symlink; data is its text
	data []byte
}

// upper is the upper layer as the archive describes it.
type upper struct {
	symlinks bool            // Admit.Symlinks
	ignored  map[string]bool // the repository ignores these (and all below)
	left     Ignored         // what was left out for it
	files    map[string]upperFile
	whiteout map[string]bool // deleted paths (a file, or a directory and all below)
	opaque   map[string]bool // directories that hide everything below them in the base
	dirs     map[string]bool // directories present in the upper layer
}

// allowedPAX are the records the launcher's archiver writes.
var allowedPAX = map[string]bool{"path": true, "linkpath": true, "size": true, "uid": true, "gid": true, "mtime": true,
	"SCHILY.xattr.user.overlay.opaque": true}

// readUpper parses the archive, hashing every byte; it fails with
// ErrDigest unless the whole stream hashes to digest (hex).
func readUpper(r io.Reader, digest string, lim Limits, ignored map[string]bool, symlinks bool) (*upper, error) {
	h := sha256.New()
	// One byte more than the cap: reading it is how an oversized archive
	// is told from one exactly at the cap.
	lr := &io.LimitedReader{R: r, N: lim.ArchiveBytes + 1}
	tee := io.TeeReader(lr, h)
	u := &upper{symlinks: symlinks, ignored: ignored, files: map[string]upperFile{}, whiteout: map[string]bool{}, opaque: map[string]bool{}, dirs: map[string]bool{}}
	tr := tar.NewReader(tee)
	var refusal error
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			refusal = fmt.Errorf("workspace: checkpoint archive: %w", err)
			break
		}
		if n >= lim.Entries {
			refusal = refuse("the checkpoint archive has more than %d entries", lim.Entries)
			break
		}
		if refusal != nil {
			continue // read on only to prove the digest
		}
		refusal = u.add(tr, hdr, lim)
	}
	// Whatever follows the tar's end (or its first error) is hashed too:
	// the digest covers the file, so bytes that are not the checkpoint's
	// are ErrDigest whatever they hold.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return nil, fmt.Errorf("workspace: checkpoint archive: %w", err)
	}
	if lr.N <= 0 {
		return nil, refuse("the checkpoint archive is larger than %d bytes", lim.ArchiveBytes)
	}
	if hex.EncodeToString(h.Sum(nil)) != digest {
		return nil, ErrDigest
	}
	if refusal != nil {
		return nil, refusal
	}
	return u, nil
}

// add takes one archive entry by the rules of doc.go.
func (u *upper) add(tr *tar.Reader, hdr *tar.Header, lim Limits) error {
	for k := range hdr.PAXRecords {
		if !allowedPAX[k] {
			// A sparse map among them: a tiny entry that would expand.
			return refuse("the archive carries a record its writer never writes")
		}
	}
	name := strings.TrimSuffix(hdr.Name, "/")
	if name == "" || path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") {
		return refuse("an entry name is not a clean relative path")
	}
	if gitDir(name) {
		// The worker's repository metadata is never part of its change:
		// hooks, configuration, alternates, a gitdir file all stay behind.
		return nil
	}
	if !plainName(name) {
		return refusePath(name, "a path has control or invisible characters, quotes, backslashes or invalid UTF-8")
	}
	if ignoredPath(u.ignored, name) && hdr.Typeflag != tar.TypeChar {
		// Ignored by the repository (node_modules, __pycache__, build
		// output): not part of the change, whatever it is — npm's .bin
		// symlinks refuse nothing. A whiteout is still read: deleting a
		// tracked file is a change (git never ignores a tracked path).
		if u.left.Count++; len(u.left.Sample) < ignoredSample {
			u.left.Sample = append(u.left.Sample, name)
		}
		return nil
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		u.dirs[name] = true
		if hdr.PAXRecords["SCHILY.xattr.user.overlay.opaque"] == "y" {
			u.opaque[name] = true
		}
	case tar.TypeReg:
		if hdr.Size < 0 || hdr.Size > lim.FileBytes {
			return refusePath(name, "a file is larger than %d bytes", lim.FileBytes)
		}
		// All upper files together are bounded by the archive's cap; only
		// the changed ones count against ChangeBytes (Harvest): a
		// formatter's copy-ups of files it left as they were are no change.
		data := make([]byte, hdr.Size)
		if _, err := io.ReadFull(tr, data); err != nil {
			return refuse("a file is shorter than its header says")
		}
		u.files[name] = upperFile{exec: hdr.Mode&0o100 != 0, data: data}
	case tar.TypeChar:
		if hdr.Devmajor != 0 || hdr.Devminor != 0 {
			return refusePath(name, "the change has a device node")
		}
		u.whiteout[name] = true
	case tar.TypeSymlink:
		if !u.symlinks {
			return refusePath(name, "the change has a symlink; symlinks are not harvested on this target")
		}
		if !plainName(hdr.Linkname) || !pathglob.LinkInside(name, hdr.Linkname) {
			return refusePath(name, "the change has a symlink that leaves the repository or reaches its metadata")
		}
		u.files[name] = upperFile{link: true, data: []byte(hdr.Linkname)}
	case tar.TypeLink:
		return refusePath(name, "the change has a hard link entry")
	case tar.TypeFifo:
		return refusePath(name, "the change has a FIFO")
	default:
		return refusePath(name, "the change has a special file (type %q)", hdr.Typeflag)
	}
	return nil
}

// gitDir reports whether any component of p is .git (in any letter case:
// git itself refuses such paths on case-insensitive systems).
func gitDir(p string) bool {
	for c := range strings.SplitSeq(p, "/") {
		if strings.EqualFold(c, ".git") {
			return true
		}
	}
	return false
}

// plainName: valid UTF-8, no control, format or invisible characters, and
// none of the characters git would quote in a patch header.
func plainName(p string) bool {
	if !utf8.ValidString(p) || strings.ContainsAny(p, "\"\\") {
		return false
	}
	for _, r := range p {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Co, r) || r == utf8.RuneError ||
			(r != ' ' && unicode.IsSpace(r)) || unicode.Is(unicode.Variation_Selector, r) {
			return false
		}
	}
	return true
}

// baseEntry is one blob of the base tree.
type baseEntry struct {
	mode string // "100644", "100755", "120000", "160000"
	oid  string
	size int64 // -1 for a submodule
}

// baseTree lists the base OID's tree, with each blob's size, in the
// kernel's own clone.
func baseTree(ctx context.Context, g runner, oid string) (map[string]baseEntry, error) {
	out, err := g.run(ctx, "ls-tree", "-r", "-z", "-l", "--full-tree", oid+"^{commit}")
	if err != nil {
		return nil, err
	}
	tree := map[string]baseEntry{}
	for rec := range strings.SplitSeq(strings.TrimSuffix(out, "\x00"), "\x00") {
		if rec == "" {
			continue
		}
		meta, p, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 4 {
			return nil, fmt.Errorf("workspace: ls-tree record")
		}
		size := int64(-1)
		if f[3] != "-" {
			if size, err = strconv.ParseInt(f[3], 10, 64); err != nil || size < 0 {
				return nil, fmt.Errorf("workspace: ls-tree size")
			}
		}
		tree[p] = baseEntry{mode: f[0], oid: f[2], size: size}
	}
	return tree, nil
}

// blobID is git's object id of data as a blob, in the object format the
// base's ids are in (SHA-1 for 40 hex digits, SHA-256 for 64): a copied-up
// file is compared with its base by id, without asking git for the base's
// bytes.
func blobID(data []byte, format int) string {
	hdr := "blob " + strconv.Itoa(len(data)) + "\x00"
	if format == 64 {
		h := sha256.New()
		h.Write([]byte(hdr))
		h.Write(data)
		return hex.EncodeToString(h.Sum(nil))
	}
	h := sha1.New()
	h.Write([]byte(hdr))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// hidden reports whether the upper layer hides the base path p: a
// whiteout or an opaque directory at p or above it, or an upper file or
// directory above it (a file hides a directory), or an upper directory at
// p itself (a directory hides a file).
func (u *upper) hidden(p string) bool {
	if u.whiteout[p] || u.dirs[p] {
		return true
	}
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if u.whiteout[d] || u.opaque[d] {
			return true
		}
		if _, ok := u.files[d]; ok {
			return true
		}
	}
	return false
}

// Change is a workspace's change against its base, ready for git_commit.
type Change struct {
	Patch []byte   // a git patch; empty when nothing changed
	Paths []string // the paths it touches, sorted
	// Ignored is what the repository's ignore rules left out.
	Ignored Ignored
}

// Harvest reads the checkpoint archive archive (whose SHA-256 must be
// digest, hex) of the workspace prepared as root/id at baseOID, and returns
// its change as a patch. What the archive holds is only read, never
// extracted or followed; the base is read from the kernel's own clone by
// git with every repository-configurable execution path off. A rule the
// change breaks is a *Refusal.
func Harvest(ctx context.Context, archive io.Reader, digest string, c Clone, lim Limits, admit Admit) (Change, error) {
	lim = lim.withDefaults()
	if !protocol.ValidID(c.ID) || !oidPattern.MatchString(c.BaseOID) || !protocol.ValidDigest(digest) {
		return Change{}, fmt.Errorf("%w: id, base oid or digest", ErrInvalid)
	}
	g := runner{git: c.Git, dir: path.Join(c.Root, c.ID)}
	// The repository's ignore rules, as git applies them to the base's
	// clone, decide what is not part of the change: a first pass lists
	// the archive's names for git, the second (verified) pass leaves the
	// ignored ones out. An archive that cannot be read twice is harvested
	// whole.
	var ignored map[string]bool
	if s, ok := archive.(io.Seeker); ok {
		names, err := archiveNames(archive, lim)
		if err == nil {
			ignored, err = g.ignoredNames(ctx, names)
		}
		if err != nil {
			return Change{}, err
		}
		if _, err := s.Seek(0, io.SeekStart); err != nil {
			return Change{}, err
		}
	}
	u, err := readUpper(archive, digest, lim, ignored, admit.Symlinks)
	if err != nil {
		return Change{}, err
	}
	base, err := baseTree(ctx, g, c.BaseOID)
	if err != nil {
		return Change{}, err
	}
	// What differs from the base. A copied-up file whose id and mode are
	// the base's is no change, told by hashing here: no git process per
	// unchanged file.
	var names []string
	var need []string // base blobs whose bytes the patch needs
	var changed int64
	for p, f := range u.files {
		b, inBase := base[p]
		if inBase && b.mode == fileMode(f) && blobID(f.data, len(c.BaseOID)) == b.oid {
			continue
		}
		if changed += int64(len(f.data)); changed > lim.ChangeBytes {
			return Change{}, refuse("the changed files are larger than %d bytes together", lim.ChangeBytes)
		}
		names = append(names, p)
	}
	for p := range base {
		if _, ok := u.files[p]; !ok && u.hidden(p) {
			names = append(names, p)
		}
	}
	slices.Sort(names)
	for _, p := range names {
		b, inBase := base[p]
		if !inBase {
			continue
		}
		if b.mode == "160000" || (b.mode == "120000" && !admit.Symlinks) {
			return Change{}, refusePath(p, "the change replaces or deletes a symlink or submodule of the base")
		}
		// The patch carries a changed base file whole (its old side),
		// so one larger than the patch may be is refused before git
		// reads it.
		if b.size > int64(lim.PatchBytes) {
			return Change{}, refusePath(p, "the change touches a base file larger than the patch cap (%d bytes)", lim.PatchBytes)
		}
		need = append(need, b.oid)
	}
	// One git process for every base blob the patch needs.
	blobs, err := g.batch(ctx, need, int64(lim.PatchBytes), true)
	if err != nil {
		return Change{}, err
	}
	var patch bytes.Buffer
	for _, p := range names {
		b, inBase := base[p]
		f, inUpper := u.files[p]
		old := blobs[b.oid]
		mode := fileMode(f)
		var sec section
		sec.path = p
		if inBase {
			sec.oldMode, sec.oldID, sec.old = b.mode, b.oid, old
		}
		if inUpper {
			sec.newMode, sec.newID, sec.cur = mode, blobID(f.data, len(c.BaseOID)), f.data
		}
		if inBase && inUpper && (b.mode == "120000") != f.link {
			// A file becomes a link or a link a file: git writes (and
			// applies) that as a deletion and a creation.
			del := section{path: p, oldMode: b.mode, oldID: b.oid, old: old}
			sec.oldMode, sec.oldID, sec.old = "", "", nil
			if binary(old) {
				if !admit.Binary {
					return Change{}, refusePath(p, "the change touches a binary file; binary files are not harvested on this target")
				}
				del.writeBinary(&patch, len(c.BaseOID))
			} else {
				del.writeText(&patch)
			}
		}
		switch {
		case (inUpper && binary(f.data)) || (sec.oldMode != "" && binary(old)):
			if !admit.Binary {
				return Change{}, refusePath(p, "the change touches a binary file; binary files are not harvested on this target")
			}
			sec.writeBinary(&patch, len(c.BaseOID))
		default:
			sec.writeText(&patch)
		}
		if patch.Len() > lim.PatchBytes {
			return Change{}, refuse("the patch is larger than %d bytes", lim.PatchBytes)
		}
	}
	return Change{Patch: patch.Bytes(), Paths: names, Ignored: u.left}, nil
}

// fileMode is the git mode of an upper file.
func fileMode(f upperFile) string {
	if f.link {
		return "120000"
	}
	if f.exec {
		return "100755"
	}
	return "100644"
}

// binary: a NUL anywhere. (git's own test reads only the first 8000
// bytes, so a file with its NUL past them would be harvested as text and
// land, NUL and all, on a target that admits no binary.)
func binary(b []byte) bool { return bytes.IndexByte(b, 0) >= 0 }

// section is one file's part of a git patch. An empty oldMode is a new
// file, an empty newMode a deletion.
type section struct {
	path             string
	oldMode, newMode string
	oldID, newID     string
	old, cur         []byte
}

// header writes the diff header and mode lines; from and to are the
// ---/+++ names.
func (s *section) header(w *bytes.Buffer) (from, to string) {
	tab := ""
	if strings.Contains(s.path, " ") {
		tab = "\t" // as git writes it, so a name with spaces parses
	}
	fmt.Fprintf(w, "diff --git a/%s b/%s\n", s.path, s.path)
	from, to = "a/"+s.path+tab, "b/"+s.path+tab
	switch {
	case s.oldMode == "":
		fmt.Fprintf(w, "new file mode %s\n", s.newMode)
		from = "/dev/null"
	case s.newMode == "":
		fmt.Fprintf(w, "deleted file mode %s\n", s.oldMode)
		to = "/dev/null"
	case s.oldMode != s.newMode:
		fmt.Fprintf(w, "old mode %s\nnew mode %s\n", s.oldMode, s.newMode)
	}
	return from, to
}

// writeText writes a text section: one exact hunk.
func (s *section) writeText(w *bytes.Buffer) {
	from, to := s.header(w)
	a, b := lines(s.old), lines(s.cur)
	if slices.Equal(a, b) {
		return // a mode change, or an empty file added or deleted
	}
	fmt.Fprintf(w, "--- %s\n+++ %s\n", from, to)
	writeHunk(w, a, b)
}

// writeBinary writes a GIT binary patch section: the full index line git
// apply requires (it checks the preimage by id), then the new content as
// one literal, deflated and base85-encoded as git writes it. format is
// the length of an object id in hex.
func (s *section) writeBinary(w *bytes.Buffer, format int) {
	s.header(w)
	zero := strings.Repeat("0", format)
	from, to := cmp.Or(s.oldID, zero), cmp.Or(s.newID, zero)
	if from == to {
		return // a mode change only
	}
	fmt.Fprintf(w, "index %s..%s\nGIT binary patch\n", from, to)
	writeLiteral(w, s.cur)
	writeLiteral(w, s.old) // the reverse hunk: git apply -R reads it
}

// writeLiteral writes one "literal" hunk of a GIT binary patch.
func writeLiteral(w *bytes.Buffer, data []byte) {
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	zw.Write(data)
	zw.Close()
	fmt.Fprintf(w, "literal %d\n", len(data))
	b := z.Bytes()
	for len(b) > 0 {
		n := min(len(b), 52)
		if n <= 26 {
			w.WriteByte(byte('A' + n - 1))
		} else {
			w.WriteByte(byte('a' + n - 27))
		}
		encode85(w, b[:n])
		w.WriteByte('\n')
		b = b[n:]
	}
	w.WriteByte('\n')
}

// git's base85 alphabet (base85.c), not Ascii85's.
const alphabet85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"

// encode85 writes b as git's base85: each group of four bytes (the last
// padded with zeros) as five digits, most significant first.
func encode85(w *bytes.Buffer, b []byte) {
	for len(b) > 0 {
		var v uint32
		for i := range 4 {
			v <<= 8
			if i < len(b) {
				v |= uint32(b[i])
			}
		}
		var d [5]byte
		for i := 4; i >= 0; i-- {
			d[i] = alphabet85[v%85]
			v /= 85
		}
		w.Write(d[:])
		b = b[min(4, len(b)):]
	}
}

// lines splits b after each newline; the last line may lack one.
func lines(b []byte) []string {
	var out []string
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			out = append(out, string(b))
			break
		}
		out = append(out, string(b[:i+1]))
		b = b[i+1:]
	}
	return out
}

// context3 is the unchanged lines a hunk carries on each side, as git's.
const context3 = 3

// writeHunk writes one hunk: the common prefix and suffix are trimmed and
// the middle replaced, with up to three lines of context each side. It is
// exact (git apply reproduces cur), if not always minimal.
func writeHunk(w *bytes.Buffer, a, b []string) {
	p := 0
	for p < len(a) && p < len(b) && a[p] == b[p] {
		p++
	}
	s := 0
	for s < len(a)-p && s < len(b)-p && a[len(a)-1-s] == b[len(b)-1-s] {
		s++
	}
	start := max(0, p-context3)
	after := min(context3, s)
	oldEnd, newEnd := len(a)-s+after, len(b)-s+after
	rng := func(start, end int) string {
		n := end - start
		if n == 0 {
			return strconv.Itoa(start) + ",0"
		}
		return strconv.Itoa(start+1) + "," + strconv.Itoa(n)
	}
	fmt.Fprintf(w, "@@ -%s +%s @@\n", rng(start, oldEnd), rng(start, newEnd))
	line := func(prefix, l string) {
		w.WriteString(prefix)
		w.WriteString(l)
		if !strings.HasSuffix(l, "\n") {
			w.WriteString("\n\\ No newline at end of file\n")
		}
	}
	for _, l := range a[start:p] {
		line(" ", l)
	}
	for _, l := range a[p : len(a)-s] {
		line("-", l)
	}
	for _, l := range b[p : len(b)-s] {
		line("+", l)
	}
	for _, l := range a[len(a)-s : oldEnd] {
		line(" ", l)
	}
}

// ArchiveDir opens checkpoint archives in a directory laid out as the
// launcher's checkpoint store (<sha256>.tar). Harvest re-hashes whatever
// it reads, so this source only has to be bounded, not trusted.
type ArchiveDir string

// OpenArchive opens the archive named by digest (hex) without following a
// symlink, and only if it is a regular file: a FIFO put in its place
// cannot block the kernel.
func (d ArchiveDir) OpenArchive(_ context.Context, digest string) (io.ReadCloser, error) {
	if !protocol.ValidDigest(digest) || !filepath.IsAbs(string(d)) {
		return nil, fmt.Errorf("%w: archive digest or directory", ErrInvalid)
	}
	fd, err := unix.Open(filepath.Join(string(d), digest+".tar"), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("workspace: open checkpoint archive: %w", err)
	}
	f := os.NewFile(uintptr(fd), digest)
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, errors.New("workspace: the checkpoint archive is not a regular file")
	}
	return f, nil
}
