package policy

import (
	"errors"
	"strings"
	"testing"
)

// TestEgressGrant: a policy without egress verifies as before and grants
// none; one with an allow list carries it through signing; bad host names,
// duplicates, a missing list and a bad cap are refused as invalid.
func TestEgressGrant(t *testing.T) {
	ops := newSigner(t, "ops")
	keys := Keys{ops.id: ops.pub}

	// An existing policy (no egress field) is unchanged: same document,
	// no egress.
	old, err := Verify(keys, ops.sign(t, exampleDoc()))
	if err != nil || old.Egress != nil {
		t.Fatalf("old policy: %v, egress %+v", err, old)
	}
	if strings.Contains(string(ops.sign(t, exampleDoc())), "egress") {
		t.Fatal("a policy without egress signs an egress field")
	}

	d := exampleDoc()
	d.Egress = &Egress{Allow: []string{"proxy.golang.org", "registry.npmjs.org"}, MaxBytes: 1 << 30}
	p, err := Verify(keys, ops.sign(t, d))
	if err != nil || p.Egress == nil || len(p.Egress.Allow) != 2 || p.Egress.MaxBytes != 1<<30 {
		t.Fatalf("egress policy: %v %+v", err, p)
	}
	if p.Digest == old.Digest {
		t.Fatal("the egress grant is not covered by the digest")
	}
	bound := exampleDoc()
	bound.Egress = &Egress{Allow: []string{"registry.npmjs.org"}, Lockfile: LockfileBound}
	if p, err := Verify(keys, ops.sign(t, bound)); err != nil || p.Egress.Lockfile != LockfileBound {
		t.Fatalf("lockfile-bound policy: %v %+v", err, p)
	}
	d.Egress = &Egress{}
	if p, err := Verify(keys, ops.sign(t, d)); err != nil || p.Egress == nil || len(p.Egress.Allow) != 0 {
		t.Fatalf("empty allow list: %v", err)
	}

	for name, raw := range map[string]string{
		"upper case":  `{"allow":["Proxy.golang.org"]}`,
		"ip literal":  `{"allow":["1.2.3.4"]}`,
		"port":        `{"allow":["proxy.golang.org:443"]}`,
		"wildcard":    `{"allow":["*.golang.org"]}`,
		"single":      `{"allow":["localhost"]}`,
		"trailing":    `{"allow":["proxy.golang.org."]}`,
		"duplicate":   `{"allow":["a.org","a.org"]}`,
		"missing":     `{}`,
		"null":        `{"allow":null}`,
		"zero cap":    `{"allow":[],"max_bytes":0}`,
		"unknown key": `{"allow":[],"deny":[]}`,
		"lock mode":   `{"allow":[],"lockfile":"loose"}`,
		"lock empty":  `{"allow":[],"lockfile":""}`,
	} {
		doc := `{"schema":"autonomic.policy.v1","id":"p","version":1,"capability":{"max_class":0,"grants":[],"allow":[],"forbid":[],` +
			`"budget":{"bytes_per_effect":0,"bytes_total":0,"effects_per_minute":0}},"semantic":{"max_risk":0.5},"egress":` + raw + `}`
		_, _, err := decodeDocument([]byte(doc))
		if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestValidHost(t *testing.T) {
	for h, want := range map[string]bool{
		"proxy.golang.org": true, "deb.debian.org": true, "files.pythonhosted.org": true, "a-b.c1": true,
		"": false, "org": false, "-a.org": false, "a-.org": false, "a..org": false, "a.123": false,
		"::1": false, "a_b.org": false, "a.org\x00": false, strings.Repeat("a", 64) + ".org": false,
	} {
		if ValidHost(h) != want {
			t.Errorf("ValidHost(%q) = %v", h, !want)
		}
	}
}
