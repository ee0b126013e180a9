package domain_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	moby "github.com/moby/profiles/seccomp"
	libseccomp "github.com/seccomp/libseccomp-golang"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
)

const workload = `set -e
cd /workspace
git init -q repo && cd repo
git config user.email worker@domain.invalid && git config user.name worker
printf 'int main(void){return 0;}\n' > m.c
printf 'all: m\nm: m.c\n\tcc -o m m.c\n' > Makefile
make -s && ./m
git add -A && git commit -qm init
echo "commits=$(git rev-list --count HEAD)"
sh -c 'ls / >/dev/null; cat /etc/passwd | grep -c worker' >/dev/null
echo WORKLOAD-OK`

// dockerDefault converts Docker's default profile to our format: names this
// libseccomp does not know are dropped (the ENOSYS stub answers them).
func dockerDefault(t *testing.T) []byte {
	raw, err := json.Marshal(moby.DefaultProfile())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var rules []any
	for _, r := range doc["syscalls"].([]any) {
		rule := r.(map[string]any)
		var keep []any
		for _, n := range rule["names"].([]any) {
			if _, err := libseccomp.GetSyscallFromName(n.(string)); err == nil {
				keep = append(keep, n)
			}
		}
		if len(keep) > 0 {
			rule["names"] = keep
			rules = append(rules, rule)
		}
	}
	doc["syscalls"] = rules
	raw, _ = json.Marshal(doc)
	return compileJSON(t, string(raw))
}

// TestCodingWorkloadRunsUnderProfiles: a shell, git, make and a C compiler
// run normally in a real domain under worker.json (and under Docker's
// default profile, proof that we speak the ecosystem's format), both with
// the launcher's floor.
func TestCodingWorkloadRunsUnderProfiles(t *testing.T) {
	privileged.Require(t)
	ctx := context.Background()
	wb, err := testbed.New(ctx, testbed.Options{Spec: "rootfs-builder/specs/worker.json"})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	d := wb.Domains()
	for name, prog := range map[string][]byte{"worker": compileShipped(t, "worker"), "docker-default": dockerDefault(t)} {
		t.Run(name, func(t *testing.T) {
			ws := newID("ws")
			if _, err := wb.Workspace(ws, nil); err != nil {
				t.Fatal(err)
			}
			r, err := d.Create(ctx, domain.Spec{ID: newID("wl"), Generation: 1, WorkspaceID: ws, Argv: []string{"/bin/sh", "-c", workload}, Seccomp: prog, OneShot: true})
			if err != nil {
				t.Fatal(err)
			}
			ex, err := r.Wait()
			if err != nil {
				t.Fatal(err)
			}
			out := string(r.Output())
			if ex.ExitCode == nil || *ex.ExitCode != 0 || !strings.Contains(out, "WORKLOAD-OK") || !strings.Contains(out, "commits=1") {
				t.Fatalf("workload failed under %s: %+v\n%s", name, ex, out)
			}
			if vs := r.Violations(); len(vs) != 0 {
				t.Errorf("workload caused violations: %+v", vs)
			}
		})
	}
}
