package rootfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestDeniedPaths(t *testing.T) {
	denied := []string{
		"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/root", "/root/.bashrc", "/home", "/home/u/x",
		"/etc/ssh/ssh_host_ed25519_key", "/etc/ssh/ssh_host_rsa_key", "/etc/ssl/private/ssl-cert-snakeoil.key",
		"/opt/x/id_rsa", "/srv/id_ed25519", "/var/lib/x/.ssh/authorized_keys",
		"/srv/.git-credentials", "/srv/.netrc", "/srv/.docker/config.json", "/srv/.aws/credentials",
		"/srv/.config/gh/hosts.yml", "/srv/.pgpass", "/srv/.gnupg/pubring.kbx",
	}
	for _, p := range denied {
		if Denied(p) == "" {
			t.Errorf("Denied(%q) = allowed", p)
		}
	}
	allowed := []string{
		"/etc/ssh/ssh_host_ed25519_key.pub", "/etc/ssh/ssh_config", "/etc/passwd", "/usr/bin/ssh",
		"/usr/lib/git-core/git-credential-store", "/etc/ssl/certs/ca-certificates.crt", "/homework", "/rootfs",
		"/usr/share/doc/id_rsa.txt",
	}
	for _, p := range allowed {
		if why := Denied(p); why != "" {
			t.Errorf("Denied(%q) = %q, want allowed", p, why)
		}
	}
}

// Each denylist rule must stop a real build with ErrDenied and leave
// nothing behind, whether the path is named directly, reached through a
// symlink, found in a directory walk or passed with --add.
func TestBuildRefusesDenied(t *testing.T) {
	fix := fixtureDir(t)
	write := func(rel, content string) string {
		p := filepath.Join(fix, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyPEM := "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n"
	ecPEM := "-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n"
	certPEM := "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	priv := write("tls/server.pem", keyPEM)
	ec := write("tls/ec.key", ecPEM)
	cert := write("tls/cert.pem", certPEM)
	idrsa := write("keys/id_rsa", "x")
	ided := write("keys/id_ed25519", "x")
	gitcred := write("cred/.git-credentials", "https://u:p@h")
	netrc := write("cred/.netrc", "machine h login u password p")
	docker := write("cred/.docker/config.json", "{}")
	walked := filepath.Join(fix, "tree")
	write("tree/a/b/.git-credentials", "x")
	walkedKey := filepath.Join(fix, "tree2")
	write("tree2/sub/k.pem", keyPEM)
	link := filepath.Join(fix, "shadowlink")
	if err := os.Symlink("/etc/shadow", link); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		spec Spec
		add  []Add
	}{
		{"etc shadow", Spec{Files: []Entry{{Path: "/etc/shadow"}}}, nil},
		{"etc shadow optional", Spec{Files: []Entry{{Path: "/etc/shadow", Optional: true}}}, nil},
		{"etc gshadow", Spec{Files: []Entry{{Path: "/etc/gshadow"}}}, nil},
		{"root dir", Spec{Directories: []DirEntry{{Path: "/root"}}}, nil},
		{"home dir", Spec{Directories: []DirEntry{{Path: "/home", Optional: true}}}, nil},
		{"ssh host key", Spec{Files: []Entry{{Path: "/etc/ssh/ssh_host_ed25519_key", Optional: true}}}, nil},
		{"id_rsa", Spec{Files: []Entry{{Path: idrsa}}}, nil},
		{"id_ed25519", Spec{Files: []Entry{{Path: ided}}}, nil},
		{"pem private key", Spec{Files: []Entry{{Path: priv}}}, nil},
		{"key private key", Spec{Files: []Entry{{Path: ec}}}, nil},
		{"git-credentials", Spec{Files: []Entry{{Path: gitcred}}}, nil},
		{"netrc", Spec{Files: []Entry{{Path: netrc}}}, nil},
		{"docker config", Spec{Files: []Entry{{Path: docker}}}, nil},
		{"symlink to shadow", Spec{Files: []Entry{{Path: link}}}, nil},
		{"credentials in walked dir", Spec{Directories: []DirEntry{{Path: walked}}}, nil},
		{"private key in walked dir", Spec{Directories: []DirEntry{{Path: walkedKey}}}, nil},
		{"add private key", Spec{}, []Add{{Src: priv, Dest: "/usr/share/x.pem"}}},
		{"add to denied dest", Spec{}, []Add{{Src: cert, Dest: "/root/cert.pem"}}},
		{"add shadow", Spec{}, []Add{{Src: "/etc/shadow", Dest: "/usr/share/s"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.Version, spec.Name = 1, "deny"
			dest := filepath.Join(t.TempDir(), "r")
			_, err := Build(context.Background(), &spec, dest, Options{Add: tc.add})
			if !errors.Is(err, ErrDenied) {
				t.Fatalf("Build = %v, want ErrDenied", err)
			}
			if _, err := os.Lstat(dest); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("refused build left %s behind", dest)
			}
		})
	}

	// A public certificate in a *.pem is fine.
	spec := Spec{Version: 1, Name: "ok", Files: []Entry{{Path: cert}}}
	if _, err := Build(context.Background(), &spec, filepath.Join(t.TempDir(), "r"), Options{}); err != nil {
		t.Fatalf("certificate refused: %v", err)
	}
}

// fixtureDir is a temporary directory outside /tmp: /tmp is a mountpoint the
// builder keeps empty, so host paths beneath it are refused as conflicts.
func fixtureDir(t *testing.T) string {
	t.Helper()
	base := "/var/tmp"
	if fi, err := os.Stat(base); err != nil || !fi.IsDir() {
		t.Skip("needs /var/tmp for fixtures outside /tmp")
	}
	dir, err := os.MkdirTemp(base, "rootfs-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
