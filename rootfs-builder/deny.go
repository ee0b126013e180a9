package rootfs

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// The policy lives in functions returning fresh slices, not package
// variables, so nothing can widen it at run time.

// deniedTrees are refused together with everything beneath them.
func deniedTrees() []string {
	return []string{
		"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
		"/root", "/home",
		"/etc/ssl/private", // Debian's private TLS keys (snakeoil included)
		"/etc/sudoers", "/etc/sudoers.d",
	}
}

// deniedNames are refused wherever they appear: private ssh keys and the
// stores credential helpers write.
func deniedNames() []string {
	return []string{
		"id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk",
		".git-credentials", ".netrc", "_netrc", ".pgpass", ".pypirc", ".npmrc",
		".dockercfg", ".vault-token", ".boto", ".s3cfg",
	}
}

// deniedDirNames are refused (with their contents) at any depth.
func deniedDirNames() []string {
	return []string{".ssh", ".gnupg", ".aws", ".kube", ".docker", ".password-store"}
}

// deniedSuffixes are refused at any depth.
func deniedSuffixes() []string {
	return []string{
		"/.config/gh/hosts.yml", "/.config/git/credentials", "/.config/gcloud",
		"/.docker/config.json", "/.aws/credentials",
	}
}

// Denied reports why an absolute path may never enter a rootfs, or "" when
// it may. It is applied to every host path the builder reads (including each
// symlink hop) and to every rootfs path it writes. Content-based rules (a
// *.pem holding a private key) are checked by DeniedContent.
func Denied(p string) string {
	p = path.Clean("/" + p)
	for _, t := range deniedTrees() {
		if p == t || strings.HasPrefix(p, t+"/") {
			return "under " + t
		}
	}
	if dir, base := path.Split(p); dir == "/etc/ssh/" && strings.HasSuffix(base, "_key") {
		return "ssh host private key"
	}
	for _, comp := range strings.Split(p, "/") {
		for _, d := range deniedDirNames() {
			if comp == d {
				return "credential directory " + d
			}
		}
	}
	base := path.Base(p)
	for _, n := range deniedNames() {
		if base == n {
			return "credential file " + n
		}
	}
	for _, s := range deniedSuffixes() {
		if strings.HasSuffix(p, s) || strings.Contains(p, s+"/") {
			return "credential store " + strings.TrimPrefix(s, "/")
		}
	}
	return ""
}

// needsContentCheck reports whether a file's bytes must be inspected before
// it may be copied.
func needsContentCheck(p string) bool {
	return strings.HasSuffix(p, ".pem") || strings.HasSuffix(p, ".key")
}

// maxCheckedSize bounds how much of a key-like file is held in memory; a
// larger *.pem is refused rather than streamed unchecked.
const maxCheckedSize = 16 << 20

// DeniedContent reports why the content of a key-like file is refused, or "".
// "PRIVATE KEY-----" covers PKCS#1/#8, EC, encrypted and OpenSSH armour.
func DeniedContent(data []byte) string {
	if bytes.Contains(data, []byte("PRIVATE KEY-----")) {
		return "contains a PRIVATE KEY"
	}
	return ""
}

func deniedErr(p, why string) error {
	return fmt.Errorf("%w: %s (%s)", ErrDenied, p, why)
}

// checkKeyFile applies DeniedContent to a host file.
func checkKeyFile(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCheckedSize+1))
	if err != nil {
		return err
	}
	if len(data) > maxCheckedSize {
		return deniedErr(file, "key-like file too large to inspect")
	}
	if why := DeniedContent(data); why != "" {
		return deniedErr(file, why)
	}
	return nil
}
