package main

import (
	"errors"

	"github.com/autonomic-kernel/autonomic/kernel/config"
)

// agentRun is what `autonomic run` knows when it builds the spec.
type agentRun struct {
	Agent, Task, Repo, Base, Ref, TargetID string
	Target                                 config.GitCommitTarget
	Key                                    *operatorKey
}

// agentSpec builds the episode spec of one agent run (not wired yet).
func agentSpec(r agentRun) ([]byte, error) {
	return nil, errors.New("run: agent episodes are not wired into this kernel yet")
}
