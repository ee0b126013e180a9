package config

import "testing"

// TestSensorKeysUnusedWithRules: sensor.timeout_ms and max_request_bytes
// given with kind rules are reported unused (serve warns), not ignored.
func TestSensorKeysUnusedWithRules(t *testing.T) {
	for doc, want := range map[string]bool{
		`{"state_dir":"/s","domain":{"backend":"linux"},"sensor":{"kind":"rules"}}`:                                                                                                    false,
		`{"state_dir":"/s","domain":{"backend":"linux"},"sensor":{"kind":"rules","timeout_ms":500}}`:                                                                                   true,
		`{"state_dir":"/s","domain":{"backend":"linux"},"sensor":{"kind":"rules","max_request_bytes":4096}}`:                                                                           true,
		`{"state_dir":"/s","domain":{"backend":"linux"},"sensor":{"kind":"openai_compatible","endpoint":"http://127.0.0.1:9/v1","model":"m","allowed_models":["m"],"timeout_ms":500}}`: false,
	} {
		c, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if got := c.SensorKeysUnused(); got != want {
			t.Errorf("%s: unused=%v, want %v", doc, got, want)
		}
	}
}

// TestUnverifiedKinds: unverified_kinds names adapter kinds other than
// git_commit, and the gaps are the kinds with class 3+ targets it omits.
func TestUnverifiedKinds(t *testing.T) {
	base := `"state_dir":"/s","domain":{"backend":"linux"},"sensor":{"kind":"rules"}`
	for _, bad := range []string{`["git_commit"]`, `["ftp"]`, `["artifact","artifact"]`} {
		if _, err := Parse([]byte(`{` + base + `,"unverified_kinds":` + bad + `}`)); err == nil {
			t.Errorf("unverified_kinds %s accepted", bad)
		}
	}
	c, err := Parse([]byte(`{` + base + `,"automatic_verification":true,"targets":{"artifact":{"rel":{"dir":"/a"},"rep":{"dir":"/b","class":2}},` +
		`"http_mutation":{"api":{"base_url":"https://h","methods":["POST"],"paths":["x"],"reconcile_path":"/r"}}},"unverified_kinds":["http_mutation"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if gaps := c.UnverifiedGaps(); len(gaps) != 1 || gaps[0] != "artifact" {
		t.Fatalf("gaps %v, want [artifact] (class 4 by default)", gaps)
	}
}
