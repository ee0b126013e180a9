package rootfs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// Debian names an environment bootstrapped from Debian's archive by
// mmdebstrap: a suite and the packages on top of its minbase variant. The
// archive's signatures are checked against DebianKeyring; the manifest
// records every package installed with its version and architecture.
type Debian struct {
	Suite    string   `json:"suite"`
	Packages []string `json:"packages,omitempty"`
	// Mirror is the archive's URL (default DefaultDebianMirror).
	Mirror string `json:"mirror,omitempty"`
}

// DefaultDebianMirror is the archive a Debian environment comes from when
// its spec names none; DebianKeyring holds the keys its Release files must
// be signed with.
const (
	DefaultDebianMirror = "http://deb.debian.org/debian"
	DebianKeyring       = "/usr/share/keyrings/debian-archive-keyring.gpg"
)

// ErrDebian: the bootstrap failed or left no package database.
var ErrDebian = errors.New("Debian environment failed")

var (
	debSuiteRE   = regexp.MustCompile(`^[a-z][a-z0-9-]{1,31}$`)
	debPackageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{1,99}$`)
)

func (d *Debian) validate() error {
	if !debSuiteRE.MatchString(d.Suite) {
		return fmt.Errorf("suite %q is not a Debian suite or codename", d.Suite)
	}
	if len(d.Packages) > 500 {
		return fmt.Errorf("more than 500 packages")
	}
	for _, p := range d.Packages {
		// A package name only: no version ranges, no "-" removal suffix,
		// no option an argument list could smuggle.
		if !debPackageRE.MatchString(p) {
			return fmt.Errorf("package %q is not a Debian package name", p)
		}
	}
	if d.Mirror != "" {
		u, err := url.Parse(d.Mirror)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
			strings.ContainsAny(d.Mirror, " \t\n") {
			return fmt.Errorf("mirror %q is not an http(s) URL without credentials", d.Mirror)
		}
	}
	return nil
}

// bootstrapDebian runs mmdebstrap into scratch/debian in unshare mode, so
// the packages' maintainer scripts run as root of a user namespace, never
// with the host's root; then reads the tree and the package database.
func bootstrapDebian(ctx context.Context, d *Debian, scratch string, opts Options) (*tree, *Environment, error) {
	target := filepath.Join(scratch, "debian")
	mirror := d.Mirror
	if mirror == "" {
		mirror = DefaultDebianMirror
	}
	args := []string{"--quiet", "--mode=unshare", "--variant=minbase", "--format=directory", "--keyring=" + DebianKeyring}
	if len(d.Packages) > 0 {
		args = append(args, "--include="+strings.Join(d.Packages, ","))
	}
	args = append(args, "--", d.Suite, target, mirror)
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if opts.Progress != nil {
		fmt.Fprintf(opts.Progress, "rootfs: mmdebstrap %s from %s (%d packages on minbase)\n", d.Suite, mirror, len(d.Packages))
	}
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("%w: mmdebstrap: %v: %s", ErrDebian, err, out.String())
	}
	debs, err := readDpkgStatus(filepath.Join(target, "var/lib/dpkg/status"))
	if err != nil {
		return nil, nil, err
	}
	t, err := hostTree(target)
	if err != nil {
		return nil, nil, err
	}
	return t, &Environment{Kind: "debian", Suite: d.Suite, Debian: debs}, nil
}

// readDpkgStatus lists the installed packages of a dpkg status file.
func readDpkgStatus(file string) ([]DebPackage, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDebian, err)
	}
	defer f.Close()
	var out []DebPackage
	var cur DebPackage
	installed := false
	flush := func() {
		if installed && cur.Name != "" {
			out = append(out, cur)
		}
		cur, installed = DebPackage{}, false
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			flush()
			continue
		}
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		switch k {
		case "Package":
			cur.Name = v
		case "Version":
			cur.Version = v
		case "Architecture":
			cur.Arch = v
		case "Status":
			installed = strings.HasSuffix(v, " installed")
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDebian, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no installed package in %s", ErrDebian, file)
	}
	return out, nil
}

// hostTree reads a directory the builder made (a bootstrap) as a tree,
// without following any symlink in it. Device nodes, FIFOs and sockets are
// left out (a bootstrap's /dev is beneath a mountpoint anyway).
func hostTree(root string) (*tree, error) {
	t := newTree()
	err := filepath.WalkDir(root, func(full string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, full)
		rp := path.Clean("/" + filepath.ToSlash(rel))
		fi, err := de.Info()
		if err != nil {
			return err
		}
		m := fi.Mode()
		var n *treeNode
		switch {
		case m.IsDir():
			if rp == "/" {
				t.root.mode = m.Perm()
				return nil
			}
			n = &treeNode{kind: kindDir, mode: m & (fs.ModePerm | fs.ModeSticky)}
		case m&fs.ModeSymlink != 0:
			target, err := os.Readlink(full)
			if err != nil {
				return err
			}
			n = &treeNode{kind: kindSymlink, mode: 0o777, target: target}
		case m.IsRegular():
			n = &treeNode{kind: kindFile, mode: m & (fs.ModePerm | fs.ModeSticky), src: full}
		default:
			return nil
		}
		return t.put(rp, n)
	})
	if err != nil {
		return nil, fmt.Errorf("%w: reading the bootstrap: %v", ErrDebian, err)
	}
	return t, nil
}
