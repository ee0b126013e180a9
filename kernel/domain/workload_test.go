package domain_test

import (
	"context"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/seccomp/seccomptest"
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

// dockerDefault compiles Docker's default profile with our compiler.
func dockerDefault(t *testing.T) []byte {
	raw, _, err := seccomptest.DockerDefaultJSON()
	if err != nil {
		t.Fatal(err)
	}
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
