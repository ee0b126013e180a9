package gates

// Gate is one acceptance gate of seed 000's table: the tests that prove it,
// by package. A gate an earlier issue already tests runs that test; it is
// never copied here.
type Gate struct {
	Name   string
	Proves string
	Tests  []Run
	// Scope says honestly how far the tests reach when that is less than
	// the gate's full claim.
	Scope string
}

// Run is one `go test` invocation: a package and the exact tests in it.
type Run struct {
	Package string // relative to the module root, e.g. "./store"
	Tests   []string
}

// Table lists every mandatory gate, in the seed's order.
func Table() []Gate {
	return []Gate{
		{Name: "linux_namespaces_cgroup_seccomp_overlay", Proves: "containment holds on the real kernel, not a mock", Tests: []Run{
			{"./kernel/domain", []string{"TestWorkerSeesOnlyItsDomain", "TestUpperLayerHoldsWrites", "TestInetSocketIsRefusedAndRecorded", "TestFloorCannotBeWidened", "TestX32SyscallKillsWorker", "TestHostileRequests"}},
		}},
		{Name: "old_process_fork_cleanup", Proves: "a forked descendant cannot survive domain destruction", Tests: []Run{
			{"./kernel/domain", []string{"TestDestroyKillsEscapedProcesses", "TestClosingMonitorStdinKillsDomain", "TestMonitorDeathKillsDomain"}},
		}},
		{Name: "overlay_rollback", Proves: "the disposable upperdir is genuinely gone after destroy; a restore reproduces the checkpoint exactly", Tests: []Run{
			{"./kernel/domain", []string{"TestUpperLayerHoldsWrites", "TestCheckpointRestoreReproducesView", "TestCorruptCheckpointIsRefused", "TestHostileCheckpoints"}},
		}},
		{Name: "postgresql_epoch_commit_race", Proves: "concurrent commits cannot both win across an epoch advance", Tests: []Run{
			{"./store", []string{"TestPostgresqlEpochCommitRace"}},
		}},
		{Name: "stale_epoch_race", Proves: "a prepared effect from a fenced epoch cannot commit", Tests: []Run{
			{"./store", []string{"TestStaleEpochRace"}},
		}},
		{Name: "broker_crash_after_external_mutation_reconciliation", Proves: "a crash inside the commit window reconciles to a provable outcome", Tests: []Run{
			{"./broker", []string{"TestBrokerCrashAfterExternalMutationReconciliation"}},
		}},
		{Name: "git_authoritative_commit_reconciliation", Proves: "ambiguous ref movement is reported as ambiguous, not as success", Tests: []Run{
			{"./broker", []string{"TestGitAuthoritativeCommitReconciliation"}},
		}},
		{Name: "db_outage_blocks_authority", Proves: "authority stops when durability stops (real ephemeral cluster)", Tests: []Run{
			{"./store", []string{"TestDBOutageBlocksAuthority"}},
		}},
		{Name: "af_unix_effect_broker", Proves: "worker ingress honours epoch, framing and bounds", Tests: []Run{
			{"./broker", []string{"TestAFUnixEffectBroker"}},
			{"./gates", []string{"TestEffectBrokerFromInsideADomain"}},
		}},
		{Name: "sensor_poisoning", Proves: "hostile evidence cannot escalate authority", Tests: []Run{
			{"./kernel/sensor", []string{"TestSensorPoisoning", "TestClientLiarIsRecorded"}},
			{"./kernel/episode", []string{"TestSensorPoisoningInEpisode"}},
		}},
		{Name: "semantic_outage_degradation", Proves: "sensor loss degrades autonomy instead of failing open", Tests: []Run{
			{"./kernel/sensor", []string{"TestClientDegrades", "TestClientStoppedServer", "TestDegradedReadingNarrows"}},
			{"./kernel/regulator", []string{"TestRegulator", "TestClassCeilings"}},
			{"./kernel/episode", []string{"TestSemanticOutageDegradation"}},
		}},
		{Name: "backpressure_load", Proves: "saturation rejects rather than queues unboundedly", Tests: []Run{
			{"./broker", []string{"TestBackpressureLoad"}},
		}},
		{Name: "class4_human_horizon", Proves: "class 4 cannot cross without an exact signed approval", Tests: []Run{
			{"./broker", []string{"TestClass4HumanHorizon"}},
		}},
		{Name: "coding_agent_violation_repair_epoch2", Proves: "full hostile scenario: seccomp trip, fence, destroy, restore, commit under epoch 2", Tests: []Run{
			{"./gates", []string{"TestCodingAgentScenario"}},
			{"./kernel/episode", []string{"TestEpisodeLifecycle", "TestViolationRepairEpoch2", "TestViolationStormRepairsOnce", "TestRepairRestoresThePristineBase", "TestMaxRepairsContains"}},
		}},
	}
}
