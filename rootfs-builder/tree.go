package rootfs

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"unicode/utf8"
)

// A tree is an environment's file system as an image or a Debian bootstrap
// left it, before the builder's own rules apply: every regular file's
// bytes are in a file of the builder's (src), never opened through a path
// the environment chose.
type tree struct {
	root *treeNode
}

type treeNode struct {
	kind     kind
	mode     fs.FileMode
	src      string // kindFile: the builder's copy of the content
	target   string // kindSymlink
	children map[string]*treeNode
}

func newTree() *tree {
	return &tree{root: &treeNode{kind: kindDir, mode: 0o755, children: map[string]*treeNode{}}}
}

// cleanName turns an archive member name into a rootfs path, or refuses
// it: a name with a ".." component, an empty component after the leading
// "./", invalid UTF-8, a NUL or newline is never normalised into something
// else — an image that needs that is refused whole.
func cleanName(name string) (string, error) {
	n := strings.TrimPrefix(name, "./")
	n = strings.TrimPrefix(n, "/")
	n = strings.TrimSuffix(n, "/")
	if n == "" || n == "." {
		return "/", nil
	}
	if !utf8.ValidString(n) || strings.ContainsAny(n, "\x00\n") || len(n) > 4096 {
		return "", fmt.Errorf("member name %q is not representable", name)
	}
	for _, c := range strings.Split(n, "/") {
		if c == "" || c == "." || c == ".." {
			return "", fmt.Errorf("member name %q is not a clean relative path", name)
		}
	}
	return "/" + n, nil
}

// lookup returns the node at p, or nil.
func (t *tree) lookup(p string) *treeNode {
	n := t.root
	for _, c := range splitPath(p) {
		if n.kind != kindDir {
			return nil
		}
		if n = n.children[c]; n == nil {
			return nil
		}
	}
	return n
}

// parent returns the directory p goes in, making missing ancestors 0755.
// An ancestor that is a file or a symlink refuses the entry: following a
// symlink planted by an earlier layer is how an archive writes outside the
// directory it names.
func (t *tree) parent(p string) (*treeNode, string, error) {
	parts := splitPath(p)
	if len(parts) == 0 {
		return nil, "", fmt.Errorf("the root has no parent")
	}
	n := t.root
	for i, c := range parts[:len(parts)-1] {
		next := n.children[c]
		switch {
		case next == nil:
			next = &treeNode{kind: kindDir, mode: 0o755, children: map[string]*treeNode{}}
			n.children[c] = next
		case next.kind != kindDir:
			return nil, "", fmt.Errorf("%s is beneath %s, a %s", p, "/"+strings.Join(parts[:i+1], "/"), next.kind)
		}
		n = next
	}
	return n, parts[len(parts)-1], nil
}

// put places n at p. A directory over a directory keeps the children (an
// upper layer's directory entry only changes the mode); anything else
// replaces what was there, subtree included.
func (t *tree) put(p string, n *treeNode) error {
	if p == "/" {
		if n.kind != kindDir {
			return fmt.Errorf("the root must be a directory")
		}
		t.root.mode = n.mode
		return nil
	}
	dir, name, err := t.parent(p)
	if err != nil {
		return err
	}
	if old := dir.children[name]; old != nil && old.kind == kindDir && n.kind == kindDir {
		old.mode = n.mode
		return nil
	}
	if n.kind == kindDir && n.children == nil {
		n.children = map[string]*treeNode{}
	}
	dir.children[name] = n
	return nil
}

// remove deletes p and everything beneath it; an absent path is no error
// (a whiteout may name what no lower layer has).
func (t *tree) remove(p string) {
	parts := splitPath(p)
	if len(parts) == 0 {
		return
	}
	n := t.root
	for _, c := range parts[:len(parts)-1] {
		if n = n.children[c]; n == nil || n.kind != kindDir {
			return
		}
	}
	delete(n.children, parts[len(parts)-1])
}

// walk visits every node in byte order of its path, parents first.
func (t *tree) walk(fn func(p string, n *treeNode) error) error {
	var rec func(p string, n *treeNode) error
	rec = func(p string, n *treeNode) error {
		if err := fn(p, n); err != nil {
			return err
		}
		names := make([]string, 0, len(n.children))
		for c := range n.children {
			names = append(names, c)
		}
		sort.Strings(names)
		for _, c := range names {
			if err := rec(path.Join(p, c), n.children[c]); err != nil {
				return err
			}
		}
		return nil
	}
	return rec("/", t.root)
}

// hostEtc are the files an environment's bootstrap takes from the build
// host, which no rootfs carries.
func hostEtc(rp string) bool {
	return rp == "/etc/resolv.conf" || rp == "/etc/hostname" || rp == "/etc/mailname"
}

// addTree plans an environment's tree as the rootfs's base. The builder's
// own paths win: the mountpoints stay empty (what an image keeps under
// /proc, /dev, /tmp, /run or /workspace is dropped), the generated /etc
// identity files replace the image's, and a path on the denylist (an
// image's /etc/shadow, /root) is left out. Each of these is a note, not a
// silent skip; host secrets never come from a tree, so leaving the
// image's out is the whole of the rule here.
func (p *planner) addTree(t *tree) error {
	p.env = true
	return t.walk(func(rp string, n *treeNode) error {
		if rp == "/" {
			return nil
		}
		if old, ok := p.nodes[rp]; ok && old.reserved {
			if !(old.kind == kindDir && n.kind == kindDir) {
				p.notef("environment's %s replaced by the builder's", rp)
			}
			return nil
		}
		for _, m := range mountpoints() {
			if strings.HasPrefix(rp, m+"/") {
				return nil
			}
		}
		if hostEtc(rp) {
			// mmdebstrap copies the build host's: a domain has no network
			// (a resolver there only makes lookups trip the seccomp
			// filter) and is no host of that name.
			p.notef("environment's %s left out (the build host's)", rp)
			return nil
		}
		if why := Denied(rp); why != "" {
			p.notef("environment's %s left out (%s)", rp, why)
			n.children = nil // nothing beneath a denied directory either
			return nil
		}
		if n.kind == kindFile && (needsContentCheck(rp) || needsContentCheck(n.src)) {
			// A package's test key (Go's crypto/tls testdata) is no host
			// secret, but no rootfs holds a private key: left out, noted.
			if err := checkKeyFile(n.src); err != nil {
				p.notef("environment's %s left out (a key-like file: %v)", rp, err)
				return nil
			}
		}
		pn := &node{kind: n.kind, mode: keepMode(n.mode), src: n.src, target: n.target}
		if n.kind == kindSymlink {
			pn.mode = 0o777
		}
		return p.put(rp, pn)
	})
}
