package rootfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// Environment is what a rootfs built on an environment records of it in
// its manifest: the pinned image, or the Debian suite with every package
// mmdebstrap installed and its version. Part of the identity.
type Environment struct {
	Kind   string       `json:"kind"` // "oci" or "debian"
	Image  string       `json:"image,omitempty"`
	Suite  string       `json:"suite,omitempty"`
	Debian []DebPackage `json:"debian_packages,omitempty"`
}

// DebPackage is one installed Debian package.
type DebPackage struct {
	Arch    string `json:"arch"`
	Name    string `json:"name"`
	Version string `json:"version"`
}

// encode writes the record in RFC 8785 form (keys in code-unit order).
func (e *Environment) encode(b *strings.Builder) error {
	debs := append([]DebPackage(nil), e.Debian...)
	sort.Slice(debs, func(i, j int) bool {
		if debs[i].Name != debs[j].Name {
			return debs[i].Name < debs[j].Name
		}
		return debs[i].Arch < debs[j].Arch
	})
	b.WriteString(`{`)
	sep := ""
	if len(debs) > 0 {
		b.WriteString(`"debian_packages":[`)
		for i, d := range debs {
			if !utf8.ValidString(d.Name + d.Version + d.Arch) {
				return fmt.Errorf("%w: Debian package %q is not UTF-8", ErrManifest, d.Name)
			}
			if i > 0 {
				if debs[i-1].Name == d.Name && debs[i-1].Arch == d.Arch {
					return fmt.Errorf("%w: Debian package %s:%s listed twice", ErrManifest, d.Name, d.Arch)
				}
				b.WriteByte(',')
			}
			b.WriteString(`{"arch":` + jcsString(d.Arch) + `,"name":` + jcsString(d.Name) + `,"version":` + jcsString(d.Version) + `}`)
		}
		b.WriteString(`]`)
		sep = ","
	}
	if e.Image != "" {
		b.WriteString(sep + `"image":` + jcsString(e.Image))
		sep = ","
	}
	b.WriteString(sep + `"kind":` + jcsString(e.Kind))
	if e.Suite != "" {
		b.WriteString(`,"suite":` + jcsString(e.Suite))
	}
	b.WriteString(`}`)
	return nil
}

// environmentTree makes the spec's environment, if it names one, in a
// scratch directory beside dest (the same file system, removed by the
// caller), and returns its tree and record.
func environmentTree(ctx context.Context, spec *Spec, scratch string, opts Options) (*tree, *Environment, error) {
	switch {
	case spec.OCI != nil:
		img, err := loadOCI(spec.OCI)
		if err != nil {
			return nil, nil, err
		}
		blobs := filepath.Join(scratch, "blobs")
		if err := os.Mkdir(blobs, 0o700); err != nil {
			return nil, nil, err
		}
		t, err := unpackOCI(img, blobs, defaultOCILimits)
		if err != nil {
			return nil, nil, err
		}
		return t, &Environment{Kind: "oci", Image: spec.OCI.Digest}, nil
	case spec.Debian != nil:
		return bootstrapDebian(ctx, spec.Debian, scratch, opts)
	}
	return nil, nil, nil
}
