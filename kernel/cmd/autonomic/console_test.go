package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/console"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
)

// classFourWorker proposes a class 4 release and evaluates it: the effect
// then waits for a human's approval while the worker waits too.
const classFourWorker = `
set -u
E=` + testbed.EffectClientPath + `
pick() { [[ $1 =~ \"$2\":\"?([^\",}]+) ]] && echo "${BASH_REMATCH[1]}"; }
echo "release notes" > /tmp/notes.txt
p=$($E prepare -kind artifact -target-id releases -target '{"name":"v1.0.tar"}' -payload /tmp/notes.txt) || { echo "PREPARE-FAILED $p"; exit 1; }
id=$(pick "$p" id); rev=$(pick "$p" revision)
$E evaluate -effect "$id" -revision "$rev"
sleep 600
`

// TestConsoleInBrowser: the kernel serves its web console; Debian's
// chromium, driven headless, logs in with the token the kernel wrote,
// finds the running episode's pending Action — the exact operation (effect,
// revision, payload digest, kind, target) and the command that approves
// it — opens the episode, reads its timeline in words, and sees a new
// entry arrive live. Screenshots are kept in artifacts/console/. Without
// the token, with a wrong one, or under another Host (DNS rebinding), the
// console answers nothing.
func TestConsoleInBrowser(t *testing.T) {
	chromium := "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		privileged.Skip(t, "Debian's chromium is not installed (scripts/provision_host.sh installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
	releases := filepath.Join(t.TempDir(), "releases")
	k := bootKernel(t, ctx, map[string]any{
		"policy_keys": map[string]string{"ops": base64.StdEncoding.EncodeToString(pub)},
		"sensor":      map[string]any{"kind": "rules"},
		"targets":     map[string]any{"artifact": map[string]any{"releases": map[string]any{"dir": releases, "class": 4}}},
		"regulator":   map[string]any{"start_level": "act"},
		"api":         map[string]any{"console_listen": listen},
	})
	cfg, logs, tmp := k.cfg, k.logs, k.tmp

	// A real episode whose worker proposes a class 4 release.
	grant := authority.Spec{MaxClass: 4, Grants: []authority.Grant{{Target: "releases", Kind: "artifact", MaxClass: 4}},
		Allow: []string{"**"}, Forbid: []string{}, Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 24, EffectsPerMinute: 60}}
	signed, err := policy.Sign(key, "ops", policy.Document{Schema: policy.Schema, ID: "release", Version: 1, Capability: grant, Semantic: policy.Semantic{MaxRisk: 1}})
	if err != nil {
		t.Fatal(err)
	}
	repo, base := testbed.BareRepo(t, tmp, "r.git", map[string]string{"a": "a\n"}, "base")
	spec, _ := json.Marshal(episode.Spec{OriginIntent: "publish the release notes", Repo: repo, BaseOID: base, Policy: signed, Envelope: grant,
		Argv: []string{"/bin/bash", "-c", classFourWorker}, LeaseTTL: time.Hour, RequestedCeiling: 4})
	c := api.NewClient(cfg.APISocket())
	ep, err := c.Start(ctx, spec)
	if err != nil {
		t.Fatalf("start: %v\n%s", err, logs)
	}
	var pending api.EffectView
	for pending.ID == "" {
		effs, _ := c.Effects(ctx, ep.ID)
		for _, f := range effs {
			if f.Class == 4 && f.State == "evaluating" {
				pending = f
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("no effect came to await approval: %v\n%s", effs, logs)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Its durable Action names it exactly.
	open, err := c.Actions(ctx, ep.ID, false)
	if err != nil || len(open) != 1 || open[0].Effect.ID != pending.ID || open[0].Revision != pending.Revision ||
		open[0].Digest != pending.PayloadDigest || open[0].State != "pending" {
		t.Fatalf("open actions %+v, %v; want one naming %+v", open, err, pending)
	}
	action := open[0]

	tok, err := os.ReadFile(filepath.Join(cfg.StateDir, console.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))
	base64URL := "http://" + listen
	get := func(host, auth string) (int, string) {
		req, _ := http.NewRequest("GET", base64URL+"/", nil)
		if host != "" {
			req.Host = host
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for name, c := range map[string]struct {
		host, auth string
		status     int
	}{
		"no token":    {"", "", http.StatusUnauthorized},
		"wrong token": {"", strings.Repeat("0", len(token)), http.StatusUnauthorized},
		"rebinding":   {"attacker.example:" + strings.Split(listen, ":")[1], token, http.StatusMisdirectedRequest},
		"the token":   {"", token, http.StatusOK},
	} {
		status, body := get(c.host, c.auth)
		if status != c.status {
			t.Errorf("%s: %d, want %d", name, status, c.status)
		}
		if c.status != http.StatusOK && strings.Contains(body, ep.ID) {
			t.Errorf("%s: the refusal shows the episode", name)
		}
	}

	// The browser.
	shots := filepath.Join(moduleRoot(t), "artifacts", "console")
	os.MkdirAll(shots, 0o755)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	fail := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v\n%s", step, err, logs)
		}
	}
	fail("login", chromedp.Do(bctx, chromedp.Navigate(base64URL+"/login?token="+token), chromedp.WaitVisible(`#actions .action`)))
	actions, err := chromedp.Run(bctx, chromedp.Text(`#actions`))
	fail("actions", err)
	command, err := chromedp.Run(bctx, chromedp.Text(`#actions pre.command`))
	fail("command", err)
	shot1, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	fail("screenshot", err)
	flat := strings.Join(strings.Fields(actions), " ")
	for _, want := range []string{pending.ID, action.ID, "artifact on releases, class 4", pending.PayloadDigest, fmt.Sprintf("revision %d (epoch %d)", pending.Revision, pending.Epoch)} {
		if !strings.Contains(flat, want) {
			t.Errorf("the Action does not show %q:\n%s", want, flat)
		}
	}
	if !strings.HasPrefix(command, "autonomic action approve "+action.ID+" ") {
		t.Errorf("the approve command: %q", command)
	}
	fail("episode page", chromedp.Do(bctx, chromedp.Click(`a[href="/episodes/`+ep.ID+`"]`), chromedp.WaitVisible(`#timeline tr`)))
	timeline, err := chromedp.Run(bctx, chromedp.Text(`#timeline`))
	fail("timeline", err)
	if !strings.Contains(timeline, "proposed: artifact on releases, class 4") {
		t.Errorf("the timeline does not read the proposal in words:\n%s", timeline)
	}
	// A new entry after the page was drawn arrives live.
	if _, err := c.Abort(ctx, ep.ID, "seen in the console"); err != nil {
		t.Fatal(err)
	}
	fail("live row", chromedp.Do(bctx, chromedp.WaitVisible(`#timeline tr.live`)))
	live, err := chromedp.Run(bctx, chromedp.Text(`#timeline`))
	fail("live timeline", err)
	shot2, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	fail("screenshot", err)
	if !strings.Contains(live, "episode ended aborted") {
		t.Errorf("the live row is not the episode's end:\n%s", live)
	}
	for name, b := range map[string][]byte{"overview.png": shot1, "episode.png": shot2} {
		if err := os.WriteFile(filepath.Join(shots, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", filepath.Join(shots, name), len(b))
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
