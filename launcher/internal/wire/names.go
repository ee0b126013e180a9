package wire

import (
	"time"
)

// Internal stages are this binary re-executed through /proc/self/exe with a
// fixed argv[0]. sudo always passes the command path as argv[0], so a caller
// of the sudoers rule can only ever reach serve().
const (
	InitArg0   = "autonomic-domain-init"
	StageArg0  = "autonomic-worker-stage"
	HoldArg0   = "autonomic-userns-hold"
	CkptArg0   = "autonomic-checkpoint"
	NotifyArg0 = "autonomic-notify"
)

// ReexecEnv is the whole environment of the init, the stage and the
// checkpoint helper: one P is all any needs, so the runtime starts fewer
// threads, and each stop-the-world (the init's capability drops are 45)
// waits for fewer. Without containermaxprocs=0 the runtime opens the
// host's cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us as it starts,
// before the init's pivot_root, and keeps them to re-read: the domain's
// PID 1 held two host files (issue 27, finding 5).
var ReexecEnv = []string{"GOMAXPROCS=1", "GODEBUG=containermaxprocs=0,updatemaxprocs=0"}

// RequestDeadline bounds reading the one request; actionDeadline bounds
// every action except a create's monitor phase.
const (
	RequestDeadline = 10 * time.Second
	ActionDeadline  = 30 * time.Second
)
