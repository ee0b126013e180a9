package rootfs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ManifestName is the manifest's file name at the root of a rootfs.
const ManifestName = "manifest.json"

// ManifestFormat is the manifest format this package writes and reads.
const ManifestFormat = 1

// maxManifestSize bounds Verify's read; a worker rootfs lists ~20k paths.
const maxManifestSize = 256 << 20

// ManifestEntry describes one path of a rootfs. Mode is octal text
// ("0755"), permission bits plus sticky. SHA256 and Size are of the content
// for files and of the target string for symlinks; directories have neither.
type ManifestEntry struct {
	Path   string `json:"path"`
	Type   string `json:"type"` // "dir", "file" or "symlink"
	Mode   string `json:"mode"`
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
	Target string `json:"target,omitempty"`
}

// Manifest is the decoded manifest.json.
type Manifest struct {
	Format  int             `json:"format"`
	Entries []ManifestEntry `json:"entries"`
	// Packages lists the npm packages a spec's npm section installed (name,
	// version, npm integrity), sorted; absent when there were none, so a
	// rootfs without npm keeps its identity.
	Packages []Package `json:"packages,omitempty"`
	// Environment is the image or Debian bootstrap the rootfs was built
	// on; absent for host-copied rootfses, whose identity it keeps.
	Environment *Environment `json:"environment,omitempty"`
}

// Encode returns the canonical bytes: RFC 8785 (keys in code-unit order, no
// insignificant whitespace, minimal string escaping, integers only), entries
// sorted by path, no trailing newline. These bytes' SHA-256 is the identity,
// so nothing here may depend on map order, time or locale.
func (m *Manifest) Encode() ([]byte, error) {
	entries := append([]ManifestEntry(nil), m.Entries...)
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	var b strings.Builder
	b.WriteString(`{"entries":[`)
	for i, e := range entries {
		if i > 0 && entries[i-1].Path == e.Path {
			return nil, fmt.Errorf("%w: duplicate path %q", ErrManifest, e.Path)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		if !utf8.ValidString(e.Path) || !utf8.ValidString(e.Target) {
			return nil, fmt.Errorf("%w: path %q is not UTF-8", ErrManifest, e.Path)
		}
		// Keys in RFC 8785 order: gid mode path sha256 size target type uid.
		b.WriteString(`{"gid":` + strconv.Itoa(e.GID))
		b.WriteString(`,"mode":` + jcsString(e.Mode))
		b.WriteString(`,"path":` + jcsString(e.Path))
		if e.SHA256 != "" {
			b.WriteString(`,"sha256":` + jcsString(e.SHA256))
		}
		b.WriteString(`,"size":` + strconv.FormatInt(e.Size, 10))
		if e.Target != "" {
			b.WriteString(`,"target":` + jcsString(e.Target))
		}
		b.WriteString(`,"type":` + jcsString(e.Type))
		b.WriteString(`,"uid":` + strconv.Itoa(e.UID) + `}`)
	}
	b.WriteString(`]`)
	if m.Environment != nil {
		b.WriteString(`,"environment":`)
		if err := m.Environment.encode(&b); err != nil {
			return nil, err
		}
	}
	b.WriteString(`,"format":` + strconv.Itoa(m.Format))
	if len(m.Packages) > 0 {
		pkgs := append([]Package(nil), m.Packages...)
		sortPackages(pkgs)
		b.WriteString(`,"packages":[`)
		for i, p := range pkgs {
			if i > 0 {
				if pkgs[i-1] == p {
					return nil, fmt.Errorf("%w: package %s@%s listed twice", ErrManifest, p.Name, p.Version)
				}
				b.WriteByte(',')
			}
			if !utf8.ValidString(p.Name + p.Version + p.Integrity) {
				return nil, fmt.Errorf("%w: package %q is not UTF-8", ErrManifest, p.Name)
			}
			b.WriteString(`{"integrity":` + jcsString(p.Integrity) + `,"name":` + jcsString(p.Name) + `,"version":` + jcsString(p.Version) + `}`)
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// jcsString escapes as RFC 8785 §3.2.2.2 requires: only '"', '\\' and
// control characters, with the short forms where JSON has them.
func jcsString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// DecodeManifest strictly decodes manifest bytes and requires them to be in
// canonical form: two different byte strings must never describe the same
// tree, or the identity would not be unique.
func DecodeManifest(data []byte) (*Manifest, error) {
	var m Manifest
	if err := strictDecode(data, &m, 4); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	if m.Format != ManifestFormat {
		return nil, fmt.Errorf("%w: format %d not supported (want %d)", ErrManifest, m.Format, ManifestFormat)
	}
	canon, err := m.Encode()
	if err != nil {
		return nil, err
	}
	if string(canon) != string(data) {
		return nil, fmt.Errorf("%w: not in canonical form", ErrManifest)
	}
	return &m, nil
}

// ManifestDigest returns the rootfs identity: the lowercase hex SHA-256 of
// dir/manifest.json's bytes. It does not verify the tree; use Verify.
func ManifestDigest(dir string) (string, error) {
	f, err := os.Open(filepath.Join(dir, ManifestName))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrManifest, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%w: %v", ErrManifest, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func digestBytes(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func modeString(m os.FileMode) string {
	v := uint32(m.Perm())
	if m&os.ModeSticky != 0 {
		v |= 0o1000
	}
	return fmt.Sprintf("%04o", v)
}
