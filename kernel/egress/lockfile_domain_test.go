package egress

import (
	"encoding/base64"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/lockfile"
	"github.com/autonomic-kernel/autonomic/store"
)

// lockedProject is a repository whose base commit pins is-odd 3.0.1 (and
// its is-number dependencies) in package-lock.json, as npm wrote it, and
// github.com/google/uuid v1.6.0 in go.sum.
func lockedProject(t *testing.T) map[string]string {
	lock, err := os.ReadFile("../lockfile/testdata/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"package.json":      `{"name":"t","version":"1.0.0","private":true,"dependencies":{"is-number":"7.0.0","is-odd":"3.0.1"}}`,
		"package-lock.json": string(lock),
		"go.mod":            "module example.com/t\n\ngo 1.21\n\nrequire github.com/google/uuid v1.6.0\n",
		"go.sum": "github.com/google/uuid v1.6.0 h1:NIvaJDMOsjHA8n1jAhLSgzrAzy1Hgr+hNrb57e+94F0=\n" +
			"github.com/google/uuid v1.6.0/go.mod h1:TIyPZe4MgqvfeYDBFedMoGGpEw/LqOeaOT+nhxU+yHo=\n",
	}
}

// TestLockfileBoundEgress: in a real domain under a lockfile-bound proxy
// (the Set read from the base commit of a real repository, as the
// episode reads it), the real npm ci and go mod download install what
// the lockfiles name, each tarball and zip checked against the lock's
// digest before it is filed; a package the lock does not name, npm's
// is-even or go's golang.org/x/text, is refused with its name, which
// the tool prints (go) and the refusal carries (both).
func TestLockfileBoundEgress(t *testing.T) {
	w := newWorld(t)
	files := lockedProject(t)
	bare, base := testbed.BareRepo(t, t.TempDir(), "project.git", files, "locked project")
	lock, err := lockfile.Read(t.Context(), bare, base)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Allow: registries, Cache: cache, Timeout: 2 * time.Minute, AllowedNets: siteNets(t), Lock: lock}
	var script strings.Builder
	script.WriteString("set -u\nmkdir -p \"$HOME/proj\" && cd \"$HOME/proj\"\n")
	for name, content := range files {
		script.WriteString("echo " + base64.StdEncoding.EncodeToString([]byte(content)) + " | base64 -d > " + name + "\n")
	}
	script.WriteString(`npm ci --fetch-retries=0 > ci.log 2>&1; echo "NPM_CI=$?"
test -f node_modules/is-odd/package.json && test -f node_modules/is-odd/node_modules/is-number/package.json && echo NPM_TREE=ok || tail -20 ci.log
go mod download > gomod.log 2>&1; echo "GO_DOWNLOAD=$?"; tail -5 gomod.log
test -f "$(go env GOMODCACHE)/github.com/google/uuid@v1.6.0/uuid.go" && echo GO_UUID=ok
npm install --no-save --fetch-retries=0 is-even@1.0.0 > add.log 2>&1; echo "NPM_ADD=$?"
go mod download golang.org/x/text@v0.44.0 > goadd.log 2>&1; echo "GO_ADD=$?"; cat goadd.log
`)
	x := w.run(t, cfg, script.String(), "npm_config_audit=false", "npm_config_fund=false", "npm_config_update_notifier=false")
	x.has(t, "NPM_CI=0", "NPM_TREE=ok", "GO_DOWNLOAD=0", "GO_UUID=ok", "NPM_ADD=1", "GO_ADD=1")
	if !strings.Contains(x.out, "lockfile-bound: golang.org/x/text@v0.44.0 is not in the base commit's lockfiles") {
		t.Errorf("go did not print the name the lock lacked")
	}
	var npmNamed, goNamed bool
	for _, r := range x.refusals() {
		npmNamed = npmNamed || strings.Contains(r.Reason, "is-even")
		goNamed = goNamed || strings.Contains(r.Reason, "golang.org/x/text@v0.44.0")
	}
	if !npmNamed || !goNamed {
		t.Errorf("refusals do not name is-even and golang.org/x/text: %+v", x.refusals())
	}
	l := x.ledger(t, w.s)
	for _, p := range []string{"/is-number/-/is-number-7.0.0.tgz", "/is-number/-/is-number-6.0.0.tgz", "/is-odd/-/is-odd-3.0.1.tgz", goZipPath} {
		if f, ok := find(l, p); !ok || f.Outcome != store.EgressFetched || f.Status != 200 {
			t.Errorf("%s: %+v", p, f)
		}
		if _, _, ok := cache.lookup(map[bool]string{true: "proxy.golang.org", false: "registry.npmjs.org"}[p == goZipPath] + p); !ok {
			t.Errorf("%s was not filed after its digest was checked against the lock", p)
		}
	}
	for _, f := range l {
		if f.Outcome == store.EgressRefused && !strings.Contains(f.Reason, "lockfile-bound") {
			t.Errorf("refused for another reason: %+v", f)
		}
	}
}
