package verify

import (
	"fmt"
	"slices"

	"github.com/autonomic-kernel/autonomic/store"
)

// What automatic verification means for each adapter kind. git_commit is
// verified by tests: its exact patch on its exact base, verify_argv in a
// one-shot domain. The other reference kinds carry nothing to run: an
// http_mutation's body, a git_remote's push of a commit the authoritative
// repository already holds, an artifact's bytes. For them the operator
// says, in the configuration's unverified_kinds, that they need no
// verification; their class 3 and 4 effects then pass this step with a
// recorded "none by configuration" verdict and still meet the slow loop
// (the sensor bank, max_risk, the lease), the commit horizon's whole-lease
// check and, at class 4, a human approval. A kind with no rule is denied
// with a reason that names it, and the configuration refuses to load one
// (kernel/config), so no kind is ever denied silently.
const (
	RuleTests = "tests" // verify_argv in a one-shot domain
	RuleNone  = "none"  // named in unverified_kinds
	// RuleOff: automatic_verification is off; the governor records that
	// none ran (no Runner exists then).
	RuleOff = "off"
)

// TestedKinds are the kinds verified by tests.
var testedKinds = []string{"git_commit"}

// Rule is the verification rule for kind, given the configuration's
// unverified_kinds; ok is false when kind has none.
func Rule(kind string, unverified []string) (rule string, ok bool) {
	switch {
	case slices.Contains(testedKinds, kind):
		return RuleTests, true
	case slices.Contains(unverified, kind):
		return RuleNone, true
	}
	return "", false
}

// byRule answers a kind that is not verified by tests.
func (r *Runner) byRule(kind string, b *Body) (verdict string, tested bool) {
	rule, ok := Rule(kind, r.Unverified)
	b.Rule = rule
	switch {
	case !ok:
		v, _ := deny(b, fmt.Sprintf("no verification for kind %s: it has no rule (name it in unverified_kinds)", kind))
		return v, false
	case rule == RuleNone:
		b.Reason = "no verification for " + kind + " by configuration (unverified_kinds)"
		return store.VerdictAllow, false
	}
	return "", true
}
