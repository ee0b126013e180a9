package rootfs

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
)

// cachedEntry builds the minimal spec into cache with one --add whose
// content makes the key distinct.
func cachedEntry(t *testing.T, cache, content string) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, _, _, err := BuildCached(context.Background(), loadMinimal(t), cache, Options{Add: []Add{{Src: src, Dest: "/etc/x"}}})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return dir
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "launcher.json")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func ctime(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ctim.Nano()
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func TestEvictUnreferenced(t *testing.T) {
	cache := t.TempDir()
	a := cachedEntry(t, cache, "a") // oldest, named by the config
	b := cachedEntry(t, cache, "b") // the one to go
	c := cachedEntry(t, cache, "c") // newest
	// A hostile entry-shaped symlink to a tree outside the cache, and a
	// symlink inside the doomed entry to another: neither is followed.
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostile := filepath.Join(cache, "agents-"+strings.Repeat("0", 64))
	if err := os.Symlink(outside, hostile); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(b, "workspace", "escape")); err != nil {
		t.Fatal(err)
	}
	// Not entry-shaped: never touched.
	other := filepath.Join(cache, "notes")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, `{"state_root": "/var/lib/x", "rootfs": "/var/lib/autonomic-rootfs/worker", "rootfs_manifest_sha256": "00",
		"rootfses": {"agents": {"path": "`+a+`", "manifest_sha256": "00"}}}`)

	opts := EvictOptions{Keep: 1, Configs: []string{cfg}}
	dry := opts
	dry.DryRun = true
	res, err := Evict(cache, dry)
	if err != nil || !reflect.DeepEqual(res.Evicted, []string{b}) || !exists(b) {
		t.Fatalf("dry run: %v %+v, b exists %v", err, res, exists(b))
	}
	res, err = Evict(cache, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Evicted, []string{b}) {
		t.Fatalf("evicted %v, want exactly %s", res.Evicted, b)
	}
	wantKept := map[string]string{a: "referenced", c: "newest"}
	if !reflect.DeepEqual(res.Kept, wantKept) {
		t.Fatalf("kept %v, want %v", res.Kept, wantKept)
	}
	if exists(b) || !exists(a) || !exists(c) || !exists(hostile) || !exists(other) {
		t.Fatalf("after eviction: a %v b %v c %v symlink %v notes %v", exists(a), exists(b), exists(c), exists(hostile), exists(other))
	}
	if got, err := os.ReadFile(victim); err != nil || string(got) != "keep me" {
		t.Fatalf("victim outside the cache: %q %v", got, err)
	}
	if err := Verify(a); err != nil {
		t.Fatalf("kept entry no longer verifies: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(cache, ".evict-*"))
	if len(left) != 0 {
		t.Fatalf("eviction left %v", left)
	}
	// Idempotent.
	res2, err := Evict(cache, opts)
	if err != nil || len(res2.Evicted) != 0 || !reflect.DeepEqual(res2.Kept, wantKept) {
		t.Fatalf("second eviction: %v %+v", err, res2)
	}
	// A cache hit makes an entry the newest: a is served again, so with
	// no configuration and keep 1 it is a that stays and c that goes. The
	// hit is stamped beside the entry, not on it: the launcher's
	// verification record is keyed by the entry's ctime.
	before := ctime(t, a)
	if again := cachedEntry(t, cache, "a"); again != a {
		t.Fatalf("cache hit gave %s, want %s", again, a)
	}
	if ctime(t, a) != before {
		t.Fatalf("a cache hit changed the entry's ctime (the launcher would re-verify it)")
	}
	// A symlink in place of c's stamp: eviction removes the link, not its target.
	if err := os.Remove(usedStamp(c)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, usedStamp(c)); err != nil {
		t.Fatal(err)
	}
	res, err = Evict(cache, EvictOptions{Keep: 1})
	if err != nil || !reflect.DeepEqual(res.Evicted, []string{c}) || !exists(a) {
		t.Fatalf("after a hit on a: %v %+v", err, res)
	}
	if exists(usedStamp(c)) || exists(usedStamp(b)) || !exists(usedStamp(a)) {
		t.Fatalf("stamps after eviction: a %v b %v c %v", exists(usedStamp(a)), exists(usedStamp(b)), exists(usedStamp(c)))
	}
	if got, err := os.ReadFile(victim); err != nil || string(got) != "keep me" {
		t.Fatalf("victim behind a stamp symlink: %q %v", got, err)
	}
	// A symlink in place of a's stamp is not followed by a hit either.
	if err := os.Remove(usedStamp(a)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, usedStamp(a)); err != nil {
		t.Fatal(err)
	}
	vbefore, _ := os.Stat(victim)
	cachedEntry(t, cache, "a")
	if vafter, _ := os.Stat(victim); !vafter.ModTime().Equal(vbefore.ModTime()) {
		t.Fatalf("a cache hit touched the target of a symlinked stamp")
	}
	// Referenced through another path to the same tree (by inode).
	alias := filepath.Join(t.TempDir(), "alias")
	if err := os.Symlink(cache, alias); err != nil {
		t.Fatal(err)
	}
	res, err = Evict(cache, EvictOptions{Referenced: []string{filepath.Join(alias, filepath.Base(a))}})
	if err != nil || len(res.Evicted) != 0 || res.Kept[a] != "referenced" {
		t.Fatalf("reference by alias: %v %+v", err, res)
	}
}

func TestEvictRefuses(t *testing.T) {
	cache := t.TempDir()
	a := cachedEntry(t, cache, "a")
	link := filepath.Join(t.TempDir(), "cache-link")
	if err := os.Symlink(cache, link); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		cache string
		opts  EvictOptions
	}{
		"relative cache":       {"rel/cache", EvictOptions{}},
		"unclean cache":        {cache + "/../" + filepath.Base(cache), EvictOptions{}},
		"root":                 {"/", EvictOptions{}},
		"symlinked cache":      {link, EvictOptions{}},
		"negative keep":        {cache, EvictOptions{Keep: -1}},
		"missing config":       {cache, EvictOptions{Configs: []string{filepath.Join(cache, "nope.json")}}},
		"malformed config":     {cache, EvictOptions{Configs: []string{writeConfig(t, `{"rootfses": [`)}}},
		"relative rootfs":      {cache, EvictOptions{Configs: []string{writeConfig(t, `{"rootfses": {"agents": {"path": "agents"}}}`)}}},
		"wrong-typed rootfses": {cache, EvictOptions{Configs: []string{writeConfig(t, `{"rootfses": ["x"]}`)}}},
	} {
		if _, err := Evict(tc.cache, tc.opts); !errors.Is(err, ErrEvict) {
			t.Errorf("%s: %v, want ErrEvict", name, err)
		}
		if !exists(a) {
			t.Fatalf("%s: a refused eviction removed %s", name, a)
		}
	}
}

// A live domain's root is a bind mount of its rootfs in the domain's own
// mount namespace: that entry is kept though nothing names it.
func TestEvictKeepsMounted(t *testing.T) {
	privileged.Require(t)
	cache := t.TempDir()
	a := cachedEntry(t, cache, "a")
	b := cachedEntry(t, cache, "b")
	at := t.TempDir()
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount --bind "$1/proc" "$2" && echo mounted && exec sleep 60`, "sh", a, at)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "mounted\n" {
		t.Fatalf("bind mount in a new namespace: %q", line)
	}
	res, err := Evict(cache, EvictOptions{})
	if err != nil || !reflect.DeepEqual(res.Evicted, []string{b}) || res.Kept[a] != "mounted" || !exists(a) {
		t.Fatalf("with %s mounted: %v %+v", a, err, res)
	}
	cmd.Process.Kill()
	cmd.Wait()
	res, err = Evict(cache, EvictOptions{})
	if err != nil || !reflect.DeepEqual(res.Evicted, []string{a}) || exists(a) {
		t.Fatalf("once unmounted: %v %+v", err, res)
	}
}
