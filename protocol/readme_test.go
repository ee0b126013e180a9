package protocol

import (
	"bytes"
	"encoding/hex"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// README.md is the normative specification. These tests fail when the
// package gains a code, action, response type or field the specification
// does not describe, when the catalogue table disagrees with the catalogue,
// or when a worked example stops being admitted.

func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mentioned(doc, name string) bool { return strings.Contains(doc, "`"+name+"`") }

func TestReadmeCatalogueTable(t *testing.T) {
	doc := readme(t)
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9_]+)` \\| ([^|]+) \\| (yes|no) \\| [^|]+ \\|$")
	rows := map[Code][2]string{}
	for _, m := range row.FindAllStringSubmatch(doc, -1) {
		if _, dup := rows[Code(m[1])]; dup {
			t.Errorf("catalogue row %s appears twice", m[1])
		}
		rows[Code(m[1])] = [2]string{strings.TrimSpace(m[2]), m[3]}
	}
	for _, c := range Codes() {
		r, ok := rows[c]
		if !ok {
			t.Errorf("README.md has no catalogue row for %s", c)
			continue
		}
		e := E(c)
		if r[0] != e.Message {
			t.Errorf("%s: README message %q, catalogue %q", c, r[0], e.Message)
		}
		if (r[1] == "yes") != e.Retryable {
			t.Errorf("%s: README retryable %s, catalogue %v", c, r[1], e.Retryable)
		}
	}
	for c := range rows {
		if !Known(c) {
			t.Errorf("README.md lists %s, which is not in the catalogue", c)
		}
	}
}

func TestReadmeNamesEveryActionTypeAndField(t *testing.T) {
	doc := readme(t)
	for _, a := range []string{ActionPreflight, ActionCreate, ActionFreeze, ActionThaw, ActionCheckpoint, ActionDestroy, ActionInspect, ActionRelease, ActionImport} {
		if !strings.Contains(doc, "| `"+a+"` |") && !strings.Contains(doc, "| `"+a+"`,") {
			t.Errorf("README.md has no table row for action %s", a)
		}
	}
	if got := len(LauncherRequestSchema().Kinds); got != 9 {
		t.Errorf("the schema has %d actions; update README.md §5.1 and this test", got)
	}
	for typ := range LauncherResponseSchema().Kinds {
		if !strings.Contains(doc, "**`"+typ+"`**") {
			t.Errorf("README.md does not describe the %s body", typ)
		}
	}
	for kind, f := range LauncherRequestSchema().Kinds {
		for _, name := range append(append([]string{}, f.Required...), f.Optional...) {
			if !mentioned(doc, name) {
				t.Errorf("action %s: field %s not in README.md", kind, name)
			}
		}
	}
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, string)
	walk = func(t0 reflect.Type, prefix string) {
		for t0.Kind() == reflect.Pointer || t0.Kind() == reflect.Slice {
			t0 = t0.Elem()
		}
		if t0.Kind() != reflect.Struct || seen[t0] {
			return
		}
		seen[t0] = true
		for name, ft := range jsonFields(t0) {
			if !mentioned(doc, name) && !mentioned(doc, prefix+name) {
				t.Errorf("%s.%s: field %q not in README.md", t0.Name(), name, prefix+name)
			}
			sub := ""
			if t0 == reflect.TypeFor[LauncherRequest]() {
				sub = name + "."
			}
			walk(ft, sub)
		}
	}
	walk(reflect.TypeFor[LauncherRequest](), "")
	walk(reflect.TypeFor[LauncherResponse](), "")
	if len(seen) < 12 {
		t.Errorf("walked only %d message types", len(seen))
	}
}

func TestReadmeStatesTheLimits(t *testing.T) {
	doc := readme(t)
	for _, re := range []pattern{idPattern, requestIDPattern, envKeyPattern, digestPattern} {
		if !strings.Contains(doc, "`"+re.String()+"`") {
			t.Errorf("README.md does not state the pattern %s", re)
		}
	}
	for name, v := range map[string]int{
		"LauncherRequestMax": LauncherRequestMax, "LauncherResponseMax": LauncherResponseMax,
		"WorkerRequestMax": WorkerRequestMax, "WorkerResponseMax": WorkerResponseMax,
		"MaxArgv": MaxArgv, "MaxArgBytes": MaxArgBytes, "MaxArgvBytes": MaxArgvBytes, "MaxEnv": MaxEnv,
		"MaxEnvValueBytes": MaxEnvValueBytes, "MaxSeccompInsns": MaxSeccompInsns, "MaxGeneration": MaxGeneration,
	} {
		// The constant and its value appear on one line.
		line := regexp.MustCompile(`(?m)^.*\b` + strconv.Itoa(v) + `\b.*` + "`" + name + "`.*$|^.*`" + name + "`.*\\b" + strconv.Itoa(v) + `\b.*$`)
		if !line.MatchString(doc) {
			t.Errorf("README.md does not give %s = %d on one line", name, v)
		}
	}
	for _, lim := range []struct {
		what string
		l    Limits
	}{{"requests", LauncherRequestSchema().Limits}, {"responses", LauncherResponseSchema().Limits}} {
		want := "| " + lim.what + " | " + strconv.Itoa(lim.l.MaxDepth) + " | " + strconv.Itoa(lim.l.MaxNodes) + " |"
		if !strings.Contains(doc, want) {
			t.Errorf("README.md lacks the row %q", want)
		}
	}
	if !strings.Contains(doc, "version **"+strconv.Itoa(LauncherVersion)+"**") {
		t.Error("README.md does not name the protocol version")
	}
}

// fenced returns the bodies of the README's code blocks with the given
// info string.
func fenced(doc, info string) []string {
	var out []string
	parts := strings.Split(doc, "```"+info+"\n")
	for _, p := range parts[1:] {
		if end := strings.Index(p, "```"); end >= 0 {
			out = append(out, p[:end])
		}
	}
	return out
}

func TestReadmeExamplesAreAdmitted(t *testing.T) {
	doc := readme(t)
	hexes := fenced(doc, "hex")
	if len(hexes) != 1 {
		t.Fatalf("want one hex example, found %d", len(hexes))
	}
	wire, err := hex.DecodeString(strings.Join(strings.Fields(hexes[0]), ""))
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(wire)
	payload, err := ReadFrame(r, LauncherRequestMax, time.Time{})
	if err != nil || r.Len() != 0 {
		t.Fatalf("hex example is not exactly one frame: %v", err)
	}
	req, err := DecodeLauncherRequest(payload)
	if err != nil || req.Action != ActionPreflight {
		t.Fatalf("hex example: %+v, %v", req, err)
	}
	examples := fenced(doc, "json")
	if len(examples) < 6 {
		t.Fatalf("only %d JSON examples", len(examples))
	}
	types := map[string]bool{}
	for _, ex := range examples {
		b := []byte(ex)
		if bytes.Contains(b, []byte(`"action"`)) {
			req, err := DecodeLauncherRequest(b)
			if err != nil {
				t.Errorf("request example refused: %v\n%s", err, ex)
				continue
			}
			if len(b) > LauncherRequestMax {
				t.Errorf("request example exceeds the cap")
			}
			types["request:"+req.Action] = true
			continue
		}
		resp, err := DecodeLauncherResponse(b)
		if err != nil {
			t.Errorf("response example refused: %v\n%s", err, ex)
			continue
		}
		if len(b) > LauncherResponseMax {
			t.Errorf("response example exceeds the cap")
		}
		types[resp.Type] = true
	}
	for _, want := range []string{"request:create", TypePreflight, TypeStarted, TypeViolation, TypeExited, TypeError} {
		if !types[want] {
			t.Errorf("no admitted example of %s", want)
		}
	}
}

func TestReadmeSpecifiesTheWorkerProtocol(t *testing.T) {
	doc := readme(t)
	sec := doc[strings.Index(doc, "## 11. Worker (broker) protocol"):]
	for _, a := range []string{WorkerPrepare, WorkerEvaluate, WorkerCommit, WorkerAbort, WorkerStatus, WorkerFetchResponse} {
		if !strings.Contains(sec, "| `"+a+"` |") {
			t.Errorf("README.md §11 has no table row for action %s", a)
		}
	}
	if got := len(WorkerRequestSchema().Kinds); got != 6 {
		t.Errorf("the worker schema has %d actions; update README.md §11.3 and this test", got)
	}
	for kind, f := range WorkerRequestSchema().Kinds {
		for _, name := range append(append([]string{}, f.Required...), f.Optional...) {
			if !mentioned(sec, name) {
				t.Errorf("worker action %s: field %s not in README.md §11", kind, name)
			}
		}
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[WorkerRequest](), reflect.TypeFor[WorkerResponse](),
		reflect.TypeFor[EffectResult](), reflect.TypeFor[Chunk](), reflect.TypeFor[Approval](), reflect.TypeFor[ApprovalDocument]()} {
		for name := range jsonFields(typ) {
			if !mentioned(sec, name) {
				t.Errorf("%s.%s not in README.md §11", typ.Name(), name)
			}
		}
	}
	for _, re := range []pattern{uuidPattern, kindPattern, targetIDPattern, keyIDPattern} {
		if !strings.Contains(sec, "`"+re.String()+"`") {
			t.Errorf("README.md §11 does not state the pattern %s", re)
		}
	}
	for name, v := range map[string]int{"MaxWorkerPayload": MaxWorkerPayload, "MaxWorkerTarget": MaxWorkerTarget,
		"MaxWorkerChunk": MaxWorkerChunk, "MaxRevision": MaxRevision} {
		line := regexp.MustCompile(`(?m)^.*\b` + strconv.Itoa(v) + `\b.*` + "`" + name + "`.*$")
		if !line.MatchString(sec) {
			t.Errorf("README.md §11 does not give %s = %d on one line", name, v)
		}
	}
	for _, row := range []string{
		"| worker requests | " + strconv.Itoa(WorkerRequestSchema().Limits.MaxDepth) + " | " + strconv.Itoa(WorkerRequestSchema().Limits.MaxNodes) + " |",
		"| worker responses | " + strconv.Itoa(WorkerResponseLimits().MaxDepth) + " | " + strconv.Itoa(WorkerResponseLimits().MaxNodes) + " |",
	} {
		if !strings.Contains(sec, row) {
			t.Errorf("README.md §11 lacks the row %q", row)
		}
	}
	if !strings.Contains(sec, "Version **"+strconv.Itoa(WorkerVersion)+"**") {
		t.Error("README.md §11 does not name the worker protocol version")
	}
	kinds := map[string]bool{}
	for _, ex := range fenced(sec, "json-worker") {
		b := []byte(strings.TrimSpace(ex))
		if bytes.Contains(b, []byte(`"action"`)) {
			r, err := DecodeWorkerRequest(b)
			if err != nil {
				t.Errorf("worker request example refused: %v\n%s", err, ex)
				continue
			}
			kinds["request:"+r.Action] = true
			continue
		}
		r, err := DecodeWorkerResponse(b)
		if err != nil {
			t.Errorf("worker response example refused: %v\n%s", err, ex)
			continue
		}
		kinds["ok:"+strconv.FormatBool(r.OK)] = true
	}
	for _, want := range []string{"request:prepare", "request:commit", "ok:true", "ok:false"} {
		if !kinds[want] {
			t.Errorf("no admitted worker example of %s", want)
		}
	}
}
