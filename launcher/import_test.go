package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
	"github.com/autonomic-kernel/autonomic/launcher/internal/settings"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// importOwner stands for the kernel's account (workspace_owner_uid).
const importOwner = 65531

// serveOne runs one request through admission and its handler in this
// process, as serve does, and returns the frame it answered.
func serveOne(t *testing.T, cfg *settings.Config, request string) *protocol.LauncherResponse {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "frames")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	w := &frameWriter{out: out}
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, err := protocol.DecodeLauncherRequest([]byte(request))
		if err != nil {
			w.fail(err)
			return
		}
		w.id, w.version = req.RequestID, req.Protocol
		l := &launcher{cfg: cfg, req: req, out: w, deadline: time.Now().Add(5 * time.Second)}
		if l.state, err = openState(cfg); err != nil {
			w.fail(err)
			return
		}
		// Closing the store's descriptor drops its lock for the next request.
		defer fsat.CloseAll(l.state.root, l.state.domains, l.state.slots, l.state.checkpoints, l.state.holds)
		if err := handlers()[req.Action](l); err != nil {
			w.fail(err)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the launcher blocked")
	}
	if _, err := out.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	b, err := protocol.ReadFrame(out, protocol.LauncherResponseMax, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := protocol.DecodeLauncherResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func importReq(version int, holder, digest string) string {
	return `{"protocol":` + strconv.Itoa(version) + `,"action":"import","request_id":"r","domain_id":"` + holder + `","checkpoint":"` + digest + `"}`
}

// tarOf is a small archive holding one file.
func tarOf(t *testing.T, name, content string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// writeOwned writes b at p, owned by uid.
func writeOwned(t *testing.T, p string, b []byte, uid int) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// storeTree lists every name under the store and the holds.
func storeTree(t *testing.T, state string) []string {
	t.Helper()
	var names []string
	for _, dir := range []string{"checkpoints", "holds"} {
		root := filepath.Join(state, dir)
		err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
			names = append(names, strings.TrimPrefix(p, state))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// TestImportArchive: import stores the kernel's file under its digest,
// held by the request's domain id, where a create's openCheckpoint finds
// it whole, and leaves the file as it was; importing it again only adds a
// hold. Everything else is refused with the store and the holds as they
// were: bytes that are not their digest, a symlink, another mount, a file
// of root's, a hard link, a FIFO (without blocking), a file over the
// byte cap or over the holder's room, and import in a version-2 request.
func TestImportArchive(t *testing.T) {
	privileged.Require(t)
	state, ws := t.TempDir(), t.TempDir()
	imports := filepath.Join(ws, importsDir)
	if err := os.Mkdir(imports, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(imports, importOwner, importOwner); err != nil {
		t.Fatal(err)
	}
	cfg := &settings.Config{StateRoot: state, WorkspacesRoot: ws, WorkspaceOwnerUID: importOwner, WorkspaceOwnerGID: importOwner,
		MaxCheckpointBytes: 64 << 10, MaxCheckpointStoreBytes: 1 << 20, MaxCheckpointDomainBytes: 256 << 10}
	archive := tarOf(t, "hello.txt", "hello from another host\n")
	digest := digestOf(archive)
	src := filepath.Join(imports, digest+".tar")
	writeOwned(t, src, archive, importOwner)

	r := serveOne(t, cfg, importReq(3, "holder-a", digest))
	if r.Type != protocol.TypeCheckpoint || r.Protocol != 3 {
		t.Fatalf("import: %s %+v", r.Type, r.Error)
	}
	if c := r.Checkpoint; c.DomainID != "holder-a" || c.SHA256 != digest || c.Bytes != int64(len(archive)) || c.Entries != 0 {
		t.Fatalf("import answered %+v", c)
	}
	stored := filepath.Join(state, "checkpoints", digest+".tar")
	var st unix.Stat_t
	if err := unix.Lstat(stored, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != 0 || st.Gid != importOwner || st.Mode&0o777 != 0o640 {
		t.Fatalf("stored archive: %+v %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(state, "holds", "holder-a", digest)); err != nil {
		t.Fatalf("no hold: %v", err)
	}
	if b, err := os.ReadFile(src); err != nil || !bytes.Equal(b, archive) {
		t.Fatalf("the kernel's file changed: %v", err)
	}
	// What a create with this checkpoint does first.
	l := &launcher{cfg: cfg}
	var err error
	if l.state, err = openState(cfg); err != nil {
		t.Fatal(err)
	}
	f, err := l.openCheckpoint(digest)
	if err != nil {
		t.Fatalf("openCheckpoint of the import: %v", err)
	}
	h, err := tar.NewReader(f).Next()
	f.Close()
	fsat.CloseAll(l.state.root, l.state.domains, l.state.slots, l.state.checkpoints, l.state.holds)
	if err != nil || h.Name != "hello.txt" {
		t.Fatalf("restored archive: %+v %v", h, err)
	}
	// Already stored: one more hold, the archive untouched.
	ino := st.Ino
	if r := serveOne(t, cfg, importReq(3, "holder-b", digest)); r.Type != protocol.TypeCheckpoint || r.Checkpoint.SHA256 != digest {
		t.Fatalf("second import: %s %+v", r.Type, r.Error)
	}
	if err := unix.Lstat(stored, &st); err != nil || st.Ino != ino {
		t.Fatalf("the stored archive was replaced: %v", err)
	}
	if _, err := os.Stat(filepath.Join(state, "holds", "holder-b", digest)); err != nil {
		t.Fatalf("no hold for the second holder: %v", err)
	}

	// Each refusal gets an archive of its own, not in the store yet.
	other := func(name string) ([]byte, string) {
		b := tarOf(t, name, "content of "+name+"\n")
		return b, digestOf(b)
	}
	mountedWS := t.TempDir()
	small := *cfg
	small.MaxCheckpointDomainBytes = 1024
	for _, tc := range []struct {
		name    string
		cfg     *settings.Config
		version int
		plant   func(t *testing.T) string // returns the digest to import
		want    protocol.Code
	}{
		{"absent", cfg, 3, func(t *testing.T) string { _, d := other("absent"); return d }, protocol.CodeCheckpointNotFound},
		{"digest mismatch", cfg, 3, func(t *testing.T) string {
			b, d := other("mismatch")
			writeOwned(t, filepath.Join(imports, d+".tar"), append(b[:len(b):len(b)], 0), importOwner)
			return d
		}, protocol.CodeCheckpointCorrupt},
		{"symlink", cfg, 3, func(t *testing.T) string {
			b, d := other("symlink")
			real := filepath.Join(imports, "real")
			writeOwned(t, real, b, importOwner)
			if err := os.Symlink(real, filepath.Join(imports, d+".tar")); err != nil {
				t.Fatal(err)
			}
			return d
		}, protocol.CodeCheckpointUnsafe},
		{"another mount", &settings.Config{StateRoot: state, WorkspacesRoot: mountedWS, WorkspaceOwnerUID: importOwner, WorkspaceOwnerGID: importOwner,
			MaxCheckpointBytes: 64 << 10, MaxCheckpointStoreBytes: 1 << 20, MaxCheckpointDomainBytes: 256 << 10}, 3, func(t *testing.T) string {
			dir := filepath.Join(mountedWS, importsDir)
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0700"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
			b, d := other("mount")
			writeOwned(t, filepath.Join(dir, d+".tar"), b, importOwner)
			return d
		}, protocol.CodeCheckpointUnsafe},
		{"owned by root", cfg, 3, func(t *testing.T) string {
			b, d := other("root")
			writeOwned(t, filepath.Join(imports, d+".tar"), b, 0)
			return d
		}, protocol.CodeCheckpointUnsafe},
		{"hard link", cfg, 3, func(t *testing.T) string {
			b, d := other("link")
			p := filepath.Join(imports, d+".tar")
			writeOwned(t, p, b, importOwner)
			if err := os.Link(p, filepath.Join(ws, "second-name")); err != nil {
				t.Fatal(err)
			}
			return d
		}, protocol.CodeCheckpointUnsafe},
		{"fifo", cfg, 3, func(t *testing.T) string {
			_, d := other("fifo")
			p := filepath.Join(imports, d+".tar")
			if err := unix.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, importOwner, importOwner); err != nil {
				t.Fatal(err)
			}
			return d
		}, protocol.CodeCheckpointUnsafe},
		{"over the byte cap", cfg, 3, func(t *testing.T) string {
			b := tarOf(t, "big", strings.Repeat("x", int(cfg.MaxCheckpointBytes)))
			d := digestOf(b)
			writeOwned(t, filepath.Join(imports, d+".tar"), b, importOwner)
			return d
		}, protocol.CodeCheckpointTooLarge},
		{"over the holder's room", &small, 3, func(t *testing.T) string {
			b, d := other("room")
			writeOwned(t, filepath.Join(imports, d+".tar"), b, importOwner)
			return d
		}, protocol.CodeCheckpointStoreFull},
		{"version 2", cfg, 2, func(t *testing.T) string {
			b, d := other("v2")
			writeOwned(t, filepath.Join(imports, d+".tar"), b, importOwner)
			return d
		}, protocol.CodeUnsupportedVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.plant(t)
			holder := "refused-" + strings.ReplaceAll(tc.name, " ", "-")
			holder = strings.ReplaceAll(holder, "'", "")
			before := storeTree(t, state)
			r := serveOne(t, tc.cfg, importReq(tc.version, holder, d))
			if r.Type != protocol.TypeError || r.Error.Code != tc.want {
				t.Fatalf("got %s %+v, want %s", r.Type, r.Error, tc.want)
			}
			if after := storeTree(t, state); !slices.Equal(before, after) {
				t.Fatalf("a refused import changed the store:\n%q\n%q", before, after)
			}
			if _, err := os.Lstat(filepath.Join(state, "holds", holder)); err == nil {
				t.Fatal("a refused import left a hold")
			}
		})
	}
}
