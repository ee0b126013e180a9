package rootfs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// Problem is one difference between a tree and its manifest.
type Problem struct {
	Path string
	Kind string // "missing", "extra", "type", "mode", "owner", "size", "digest", "target"
	Want string
	Got  string
}

func (p Problem) String() string {
	if p.Want == "" && p.Got == "" {
		return fmt.Sprintf("%s: %s", p.Kind, p.Path)
	}
	return fmt.Sprintf("%s: %s (manifest %s, tree %s)", p.Kind, p.Path, p.Want, p.Got)
}

// MismatchError lists every difference found; it wraps ErrMismatch.
type MismatchError struct {
	Problems []Problem
}

func (e *MismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %d problem(s)", ErrMismatch, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

func (e *MismatchError) Unwrap() error { return ErrMismatch }

// Verify checks that dir is exactly what dir/manifest.json describes: no
// path missing or extra, and each path's type, mode, owner, size and digest
// equal. It never follows a symlink in the tree. A mismatch is a
// *MismatchError listing every problem.
func Verify(dir string) error {
	f, err := os.Open(filepath.Join(dir, ManifestName))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrManifest, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxManifestSize+1))
	f.Close()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrManifest, err)
	}
	if len(data) > maxManifestSize {
		return fmt.Errorf("%w: larger than %d bytes", ErrManifest, maxManifestSize)
	}
	m, err := DecodeManifest(data)
	if err != nil {
		return err
	}
	want := make(map[string]ManifestEntry, len(m.Entries))
	for _, e := range m.Entries {
		want[e.Path] = e
	}
	var probs []Problem
	seen := make(map[string]bool, len(m.Entries))
	err = filepath.WalkDir(dir, func(full string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, full)
		rp := "/" + filepath.ToSlash(rel)
		if rel == "." {
			rp = "/"
		}
		if rp == "/"+ManifestName {
			return nil
		}
		w, ok := want[rp]
		if !ok {
			probs = append(probs, Problem{Path: rp, Kind: "extra"})
			if d.IsDir() {
				return fs.SkipDir // one report for an added tree
			}
			return nil
		}
		seen[rp] = true
		got, err := describe(full, rp)
		if err != nil {
			return err
		}
		probs = append(probs, compare(w, got)...)
		if w.Type != "dir" && d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: walking tree: %v", ErrMismatch, err)
	}
	for _, e := range m.Entries {
		if !seen[e.Path] {
			probs = append(probs, Problem{Path: e.Path, Kind: "missing"})
		}
	}
	if len(probs) == 0 {
		return nil
	}
	sort.SliceStable(probs, func(i, j int) bool { return probs[i].Path < probs[j].Path })
	return &MismatchError{Problems: probs}
}

func compare(w, g ManifestEntry) []Problem {
	var out []Problem
	add := func(kind, want, got string) {
		out = append(out, Problem{Path: w.Path, Kind: kind, Want: want, Got: got})
	}
	if w.Type != g.Type {
		add("type", w.Type, g.Type)
		return out
	}
	if w.Mode != g.Mode {
		add("mode", w.Mode, g.Mode)
	}
	if w.UID != g.UID || w.GID != g.GID {
		add("owner", fmt.Sprintf("%d:%d", w.UID, w.GID), fmt.Sprintf("%d:%d", g.UID, g.GID))
	}
	if w.Size != g.Size {
		add("size", fmt.Sprint(w.Size), fmt.Sprint(g.Size))
	}
	if w.SHA256 != g.SHA256 {
		add("digest", w.SHA256, g.SHA256)
	}
	if w.Target != g.Target {
		add("target", w.Target, g.Target)
	}
	return out
}

// describe builds the manifest entry the tree actually holds at full.
func describe(full, rp string) (ManifestEntry, error) {
	fi, err := os.Lstat(full)
	if err != nil {
		return ManifestEntry{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ManifestEntry{}, errors.New("no stat_t")
	}
	e := ManifestEntry{Path: rp, Mode: modeString(fi.Mode()), UID: int(st.Uid), GID: int(st.Gid)}
	if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
		// The manifest never records these bits; show them so a setuid
		// file cannot pass as its non-setuid twin.
		e.Mode += "+s"
	}
	switch m := fi.Mode(); {
	case m.IsDir():
		e.Type = "dir"
	case m&fs.ModeSymlink != 0:
		t, err := os.Readlink(full)
		if err != nil {
			return e, err
		}
		e.Type, e.Mode, e.Size, e.SHA256, e.Target = "symlink", "0777", int64(len(t)), digestBytes([]byte(t)), t
	case m.IsRegular():
		e.Type = "file"
		f, err := os.OpenFile(full, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return e, err
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return e, err
		}
		e.Size, e.SHA256 = n, hex.EncodeToString(h.Sum(nil))
	default:
		e.Type = m.Type().String()
	}
	return e, nil
}
