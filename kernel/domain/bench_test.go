package domain_test

import (
	"context"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
)

// BenchmarkCreateDestroyOneShot measures what a verification domain costs
// the kernel: one launcher process that creates the domain, runs /bin/true
// and destroys it (one-shot), through the same Linux backend the kernel
// uses. It reports time only; the targets of issue 2 §7 are judged by
// scripts/bench against crun and runc on the same host, never here.
func BenchmarkCreateDestroyOneShot(b *testing.B) {
	privileged.Require(b)
	d := bed.Domains()
	ws := newID("ws-bench")
	if _, err := bed.Workspace(ws, map[string]string{"README": "bench\n"}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		r, err := d.Create(ctx, domain.Spec{ID: newID("bench"), Generation: 1, WorkspaceID: ws, Argv: []string{"/bin/true"}, OneShot: true})
		if err != nil {
			b.Fatalf("create: %v", err)
		}
		ex, err := r.Wait()
		if err != nil {
			b.Fatalf("wait: %v", err)
		}
		if ex.ExitCode == nil || *ex.ExitCode != 0 || !ex.Destroyed {
			b.Fatalf("worker did not exit 0 and get destroyed: %+v", ex)
		}
	}
}
