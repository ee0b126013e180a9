package gates

// Gate is one acceptance gate of seed 000's table: the tests that prove it,
// by package. A gate an earlier issue already tests runs that test; it is
// never copied here.
type Gate struct {
	Name   string
	Proves string
	Tests  []Run
	// Scope says honestly how far the tests reach: where they ran and
	// what they stand in for. Every gate has one (TestGateScopes).
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
			// Isolation: every namespace, the filesystem, privilege and rlimits.
			{"./kernel/domain", []string{"TestWorkerSeesOnlyItsDomain", "TestWorkerNamespacesAreItsOwn", "TestUpperLayerHoldsWrites",
				"TestSharedRootPropagation", "TestDomainRootIsContained", "TestRlimitsAreTheDomains", "TestDiskIsBounded",
				"TestStderrMustBePipeOrNull", "TestBrokerSocketIsNobodys", "TestRelaySocketIsBoundLikeTheBrokers",
				// Each cgroup limit: enforced where the host offers the
				// controller (the hog is stopped), else reported not enforced
				// (and release_ready is false; see qc).
				"TestMemoryLimit", "TestPidsLimit", "TestCPULimit",
				// Seccomp: the floor, its reporting, and what a worker
				// cannot hide.
				"TestInetSocketIsRefusedAndRecorded", "TestFloorCannotBeWidened", "TestFloorConfinesFamiliesPersonaAndNewerCalls",
				"TestX32SyscallKillsWorker", "TestViolationFloodIsCoalesced", "TestSigsysHandlerHidesNothing",
				"TestAgentProfileReachesOnlyLoopback",
				// The launcher's admission: its requests, its rootfs, and the
				// one sudoers rule that reaches it (installed by make install).
				"TestHostileRequests", "TestRootfsContentIsItsIdentity", "TestRootfsMismatchIsRefused", "TestNamedRootfs",
				"TestSudoersRuleParses", "TestSudoersRuleAllowsOnlyTheLauncherWithoutArguments", "TestSudoersRuleExecsTheLauncherInPlace",
				// Issue 27: the domain's PID 1 holds no host descriptor, and
				// a worker's notified calls cost its own cgroup, not root.
				"TestInitHoldsNoHostDescriptors", "TestSendmmsgCostBounded", "TestExecFailureIsNotStarted"}},
			{"./launcher/internal/notifier", []string{"TestDestinationReadsABatchAtOnce"}},
			{"./launcher/internal/fsat", []string{"TestStateWriteIsWhole"}},
			{"./rootfs-builder", []string{"TestAddedBinaryUsesTheEnvironmentsLibraries"}},
		}, Scope: "this host's kernel and cgroup layout; a cgroup limit the host does not offer is proven reported, not enforced (the report's host.not_enforced), and the host matrix (hosts section) covers the other layouts"},
		{Name: "old_process_fork_cleanup", Proves: "a forked descendant cannot survive domain destruction", Tests: []Run{
			{"./kernel/domain", []string{"TestDestroyKillsEscapedProcesses", "TestClosingMonitorStdinKillsDomain", "TestMonitorDeathKillsDomain",
				"TestDestroyFailsClosedUnderLowNOFILE", "TestDeepTreeIsDestroyed", "TestForeignCgroupIsNeverTouched", "TestOneShotMonitorSparesItsSuccessor",
				"TestDestroyUnderLowFSIZE"}},
		}, Scope: "descendants escaping by fork, setsid and deep trees on this host's kernel; the launcher acts only on cgroups it created"},
		{Name: "overlay_rollback", Proves: "the disposable upperdir is genuinely gone after destroy; a restore reproduces the checkpoint exactly", Tests: []Run{
			{"./kernel/domain", []string{"TestUpperLayerHoldsWrites", "TestCheckpointRestoreReproducesView", "TestCorruptCheckpointIsRefused", "TestHostileCheckpoints", "TestCheckpointHelperHoldsNoHostPrivilege",
				"TestCheckpointFailsClosedUnderLowNOFILE", "TestSparseRestoreIsRefused", "TestCheckpointStoreCap",
				// Issue 27: a bounded store, emptied as episodes settle; a
				// helper confined to what the tar code needs.
				"TestSparseFileCannotFillTheStore", "TestCheckpointReleased", "TestStoreQuotaPerDomain", "TestCheckpointHelperConfined"}},
			{"./launcher", []string{"TestLauncherPrivilegeLayout"}},
		}, Scope: "the launcher's overlay and checkpoint archive on this host; restore is compared file by file with the checkpointed view"},
		{Name: "postgresql_epoch_commit_race", Proves: "concurrent commits cannot both win across an epoch advance", Tests: []Run{
			{"./store", []string{"TestPostgresqlEpochCommitRace", "TestLedgerTamperingDetected"}},
		}, Scope: "a real PostgreSQL cluster; the ledger's hash chain detects a row changed behind the kernel's back"},
		{Name: "stale_epoch_race", Proves: "a prepared effect from a fenced epoch cannot commit", Tests: []Run{
			{"./store", []string{"TestStaleEpochRace"}},
		}, Scope: "the store's fence on a real cluster"},
		{Name: "broker_crash_after_external_mutation_reconciliation", Proves: "a crash inside the commit window reconciles to a provable outcome", Tests: []Run{
			{"./broker", []string{"TestBrokerCrashAfterExternalMutationReconciliation", "TestHorizonSurvivesDatabaseCrash"}},
			{"./store", []string{"TestEnterCommitIsTwoTransactions", "TestEnterCommitRedoesCommittingOnANewConnection", "TestEnterCommitInEpisode"}},
			// A kernel process restarted under the same instance id fences
			// the older one at once.
			{"./store", []string{"TestSameInstanceOlderProcessFenced"}},
		}, Scope: "every adapter (artifact, git_commit, http_mutation, git_remote, http_read) crashed in a child process at each point of the commit window, reconciled by the restarted kernel and by a kernel on another host that never held the payload; the PostgreSQL cluster killed (SIGKILL, WAL writer held) after each step of the artifact horizon, whose pre-intent transactions commit without waiting for their flush"},
		{Name: "git_authoritative_commit_reconciliation", Proves: "ambiguous ref movement is reported as ambiguous, not as success", Tests: []Run{
			{"./broker", []string{"TestGitAuthoritativeCommitReconciliation", "TestPatchBombRefused", "TestGitRemoteFastForwardOnly",
				"TestGitRemoteCredentialByReference", "TestGitRemotePushWithLease",
				// Issue 23: a message reads as what it is; .git spellings
				// refused whatever the repository's config says.
				"TestCommitMessageRefusesControls", "TestNTFSSpellingsRefused", "TestCaseAndNormalisationCollisionsRefused", "TestGrantCarriesRefs", "TestGrantRefsAlgebra",
				"TestConcurrentRunsNeverCommitUnknown", "TestRecoveryWithRemovedTarget", "TestNULPastGitsWindowIsBinary",
				// One branch per run, never a checked-out branch; links only
				// inside the repository; an operator settles only what the
				// target cannot; the kernel's own proposals bounded.
				"TestCheckedOutBranchRefused", "TestOneBranchPerRun", "TestGitCommitSymlinksWhenAllowed",
				"TestOperatorSettlesUnknownEffect", "TestTargetOutranksTheOperator", "TestPrepareKernelBounds"}},
			{"./protocol/gitref", []string{"TestTail"}},
			{"./kernel/verify", []string{"TestVerifierChecksCommittedBytes", "TestVerificationUsesBaseTestInputs"}},
		}, Scope: "real git repositories on this host; remotes are local bare repositories"},
		{Name: "db_outage_blocks_authority", Proves: "authority stops when durability stops (real ephemeral cluster)", Tests: []Run{
			{"./store", []string{"TestDBOutageBlocksAuthority"}},
			{"./kernel/cmd/autonomic", []string{"TestServeDBOutageBlocksAuthority"}},
		}, Scope: "the store, and the composed kernel (serve in-process, real launcher), against a real postmaster stopped and killed inside a commit"},
		{Name: "af_unix_effect_broker", Proves: "worker ingress honours epoch, framing and bounds", Tests: []Run{
			{"./broker", []string{"TestAFUnixEffectBroker", "TestHeldConnection", "TestHeldConnectionsAndSaturation", "TestPeerPidfdFallback", "TestPrepareFencedFirst",
				"TestPreparePayloadNotStored", "TestCommitOwnershipInItsTransaction",
				"TestHTTPPathNormalisation", "TestSpecialUseAddressesRefused", "TestHostileHTTPTargets",
				"TestPolicyEnforcedWithoutVerification", "TestRepairNarrowingEnforcedAtCommit", "TestBudgetTotalsEnforcedUnderRace",
				"TestEffectsPerMinuteEnforced"}},
			{"./kernel/authority", []string{"TestForbidGlobVariants", "TestRunsElsewherePathsNeedALift"}},
			{"./protocol/pathglob", []string{"TestNamesRefused", "TestLinkInside"}},
			{"./gates", []string{"TestEffectBrokerFromInsideADomain"}},
			// The inference relay: the other socket a domain holds (issue 13).
			{"./kernel/relay", []string{"TestRouteTable", "TestKeyInjection", "TestStreamPassesThrough", "TestBudgetReserveSettleExhaust",
				"TestNoPolicyNoInference", "TestUpstreamDown", "TestCredentialFile", "TestLogCarriesNoContent", "TestRefusalsRecordedUpToTheCap",
				// Issue 22: no provider-side fetch, a true budget bound,
				// bounded connections, errors of its own, refusals kept.
				"TestRelayRefusesProviderSideFetches", "TestRelayBudgetIsAnUpperBound", "TestRelayConnectionsBounded",
				"TestRelayErrorBodyNeverShowsTheKey", "TestRefusalRecordedWhenTheClientHangsUp", "TestRelayMemoryIsKernelWide"}},
			{"./store", []string{"TestRelayChargeRace", "TestRelayBudgetSurvivesRestart", "TestSpendTotals"}},
			// The egress proxy (issue 14): the worker's other way out, read
			// only, allowlisted, recorded and capped.
			{"./kernel/egress", []string{"TestDependenciesThroughTheProxy", "TestPinningRefusesReservedAddresses", "TestRefusals", "TestCapStopsFetches",
				"TestCapHoldsUnderConcurrency", "TestCacheServesSecondEpisode", "TestCorruptCacheIsNotServed",
				"TestUpstreamCertificateIsVerified", "TestServesOnUnixSocket", "TestConcurrencyIsBounded",
				// Issue 22: registries held to their protocol, caps both
				// ways and per request, a bounded cache.
				"TestGoProxyCannotFetchArbitraryOrigins", "TestOutboundBytesCapped", "TestHeadFloodCharged", "TestCacheBounded",
				// Every tunnel terminated with the episode's CA; lockfile-
				// bound registries; fills checked against the registry's
				// digest; connections capped; a tunnel recorded as it opens.
				"TestTunnelSNIMustMatch", "TestTunnelInnerRequestsAdmitted", "TestLockfileBoundEgress",
				"TestCacheVerifiedAgainstRegistryDigest", "TestPyPIPathDigest", "TestCachedObjectTakenDown", "TestEgressConnectionsBounded", "TestCloseCutsTunnels"}},
			{"./kernel/lockfile", []string{"TestParseNPMLock", "TestParseGoSum", "TestParseRefusals", "TestRead"}},
			{"./store", []string{"TestEgressCapIsAtomic"}},
			// A verification gets its own proxy, no wider than the worker's;
			// the demo's main job fetches its test's dependency through both.
			{"./kernel/episode", []string{"TestVerificationFetchesThroughItsOwnProxy", "TestEpisodeTrustsItsEgressCA", "TestSaturationIsNotDrift"}},
			{"./kernel/cmd/autonomic", []string{"TestRunFetchesTheTestsDependency", "TestSetupLayerCachedByLockfiles"}},
			// A setup layer's fetches go through the proxy once per key;
			// verification restores the layer and refuses a change it shadows.
			{"./kernel/verify", []string{"TestVerifyDeniesAChangeTheLayerShadows"}},
			{"./kernel/workspace", []string{"TestShadowHidesWhatTheLayerHolds"}},
			{"./store", []string{"TestSetupLayers"}},
		}, Scope: "the socket from inside a real domain and from the host; HTTP targets are loopback servers; the signed lease's paths, bytes and rates checked at the commit horizon with verification off; the egress proxy inside real domains (this tree's launcher, the agents rootfs, the agent profile, the egress socket bridged by autonomic-entry) with the real go and npm against the real registries, which resolve here to a reserved range the test allows as an operator would (egress.allowed_nets), direct connections around it refused as violation frames, and loopback HTTPS upstreams for redirects, certificates and caps; the inference relay over a real Unix socket in front of the fixture models, with real PostgreSQL budgets"},
		{Name: "sensor_poisoning", Proves: "hostile evidence cannot escalate authority", Tests: []Run{
			{"./kernel/sensor", []string{"TestSensorPoisoning", "TestClientLiarIsRecorded"}},
			{"./kernel/episode", []string{"TestSensorPoisoningInEpisode", "TestMaxRiskDecidesOnTheProductionPath"}},
			{"./kernel/governor", []string{"TestMaxRiskDecides", "TestThrottleTakesEffect", "TestDependencyLiftReachesTheBank"}},
			// Each rule rises from a real episode and is what refused it;
			// the bank runs with automatic verification off too.
			{"./kernel/episode", []string{"TestRuleSensorsRiseFromRealEpisodes"}},
			{"./kernel/server", []string{"TestSlowLoopWithoutVerification"}},
		}, Scope: "hostile sensor replies from a loopback model server; max_risk and a throttle held at the commit horizon; the rule bank deciding real episodes' effects, verification on and off"},
		{Name: "semantic_outage_degradation", Proves: "sensor loss degrades autonomy instead of failing open", Tests: []Run{
			{"./kernel/sensor", []string{"TestClientDegrades", "TestClientStoppedServer", "TestDegradedReadingNarrows"}},
			{"./kernel/regulator", []string{"TestRegulator", "TestClassCeilings"}},
			{"./kernel/episode", []string{"TestSemanticOutageDegradation"}},
		}, Scope: "a loopback model server stopped, slowed and lying"},
		{Name: "backpressure_load", Proves: "saturation rejects rather than queues unboundedly", Tests: []Run{
			{"./broker", []string{"TestBackpressureLoad", "TestPrepareQuota", "TestPayloadRetention"}},
		}, Scope: "one broker under concurrent load on this host"},
		{Name: "class4_human_horizon", Proves: "class 4 (and, where escalated, what the lease does not grant) cannot cross without an exact signed approval", Tests: []Run{
			{"./broker", []string{"TestClass4HumanHorizon", "TestActionThreeChecks", "TestReplayedApprovalMintsOnce", "TestActionSnoozeAndDismiss", "TestActionsAreBounded",
				"TestActionsAreBoundedPerEpisode", "TestEffectOutsideLeaseOpensAction"}},
			{"./kernel/cmd/autonomic", []string{"TestActionCommands"}},
			{"./kernel/episode", []string{"TestVerificationPerKindOnTheProductionPath", "TestEpisodeParksWhileItsActionWaits", "TestEffectOutsideLeaseParksItsEpisode",
				"TestHarvestWaitsOnItsAction"}},
		}, Scope: "Ed25519 approvals checked by the broker; a real worker's unverified kinds, approved class 4 artifact and escalated proposal outside its lease, and a harvest waiting on its Action, through the production governor"},
		{Name: "coding_agent_violation_repair_epoch2", Proves: "full hostile scenario: seccomp trip, fence, destroy, restore, commit under epoch 2", Tests: []Run{
			{"./gates", []string{"TestCodingAgentScenario"}},
			{"./kernel/episode", []string{"TestEpisodeLifecycle", "TestViolationRepairEpoch2", "TestRepairNarrowingEnforcedOnTheProductionPath", "TestViolationStormRepairsOnce", "TestRepairRestoresThePristineBase", "TestMaxRepairsContains",
				// An agent that only edits files: its change harvested from
				// the checkpoint archive and taken through the horizon, a
				// hostile workspace read as data, and the wall-time bound.
				"TestHarvestLandsTheFix", "TestHarvestDeniedByPolicy", "TestHarvestHostileWorkspace", "TestWallTimeEndsAnEpisode",
				// A harvest's end is final only once recorded, and a restart
				// ends a landed harvest instead of running its worker again.
				"TestHarvestEndRetriedWhileStoreUnavailable", "TestHarvestLandedEndLostRestart",
				// Issue 23: the worker cannot commit for the harvest; what the
				// target admits (binary, large), its own branch, what the
				// repository ignores recorded.
				"TestWorkerCannotCommitForTheHarvest", "TestHarvestLandsBinaryWhenTargetAllows", "TestRunsOnTheirOwnBranches",
				"TestHarvestIgnoredInTheLedger", "TestHarvestLargerThanAFrame"}},
			{"./kernel/workspace", []string{"TestHarvestRefusesHostileEntries", "TestHarvestBoundsAndDigest", "TestHarvestHonoursIgnoreRules",
				"TestHarvestBinaryWhenAllowed", "TestHarvestSymlinksWhenAllowed", "TestRefusalNamesThePathEscaped", "TestCopyUpsAreNotChanges"}},
		}, Scope: "autonomic serve (this tree's build) as the service account, the installed launcher (proven to be this tree's build) through the sudoers rule, so make install must have run; a fixture model and a scripted agent, not a live LLM"},
		{Name: "real_agent_inference_relay", Proves: "a real agent CLI in a domain reaches nothing but its relay, which forwards only inference with a key the domain never holds", Tests: []Run{
			// The containment proof (issue 13 §6) and its mutations.
			{"./gates/relayproof", []string{"TestContainmentProof", "TestMutationsFailTheProof"}},
			// Its parts: the bridge to the relay socket, loopback only.
			{"./kernel/domain", []string{"TestEntryBridgesToTheRelay", "TestAgentProfileReachesOnlyLoopback", "TestRelaySocketIsBoundLikeTheBrokers"}},
			// The main job as production runs it, with each shipped agent.
			{"./gates", []string{"TestRealAgentsFixTheReferenceRepository"}},
			{"./kernel/cmd/autonomic", []string{"TestRunLandsEachAgentsFix"}},
		}, Scope: "the proof: the real Codex, Claude Code and opencode CLIs from the agents rootfs (built from npm on first use, cached) in a domain of this tree's launcher run directly as root through internal/testbed (not autonomic serve, not the installed launcher), under the agent seccomp profile; the relay is kernel/relay and the egress proxy kernel/egress, started by the test on the episode's sockets as the controller starts them (not by autonomic serve), with a real PostgreSQL budget, in front of a fixture upstream that scripts the hostile turns, not a live model or provider; the attack uses what the rootfs carries (python3, bash /dev/tcp, find, grep): no curl; mutations (route check, key placement, network namespace, the agent profile's connect notification, the workspace mount, environment scrubbing, the model allowlist, the header filter, the egress allow list) run against Codex and are run in copies of the tree by scripts/mutate_relay_proof.sh; the main job: Codex, Claude Code and opencode each fix the reference repository through autonomic run, autonomic serve as the service account and the installed launcher through sudo, reaching a fixture model (not a live provider) only through their relay, the change landing by harvest through the horizon"},
		{Name: "queue_takeover_exactly_once", Proves: "tasks survive their command and their host: every task ends exactly once and lands once when kernels share one database and one is killed", Tests: []Run{
			{"./store", []string{"TestTaskClaimOrder", "TestTaskClaimsAreExclusive", "TestTaskTakeover", "TestTaskCancel", "TestTaskInputRefused", "TestReservationExhaustion", "TestBudgetActionSnoozeAndDismiss", "TestArchiveReplication", "TestEgressReservation", "TestResumedEpisodeSettlesOnce"}},
			{"./kernel/episode", []string{"TestAdmitReservesEgress"}},
			{"./broker", []string{"TestReconcileLeavesAnotherHostsEffects"}},
			{"./launcher", []string{"TestImportArchive"}},
			{"./kernel/api", []string{"TestTaskRoutes"}},
			{"./kernel/cmd/autonomic", []string{"TestThreeKernelsOneDatabase", "TestRunSurvivesInterrupt", "TestTakeoverRestoresOnAnotherHost"}},
		}, Scope: "three kernel processes (this test binary re-executed as serve) on one machine, each with its own testbed launcher (direct, as root), checkpoint store, state_dir, uid slice and cgroup parent, on one external PostgreSQL; one SIGKILLed mid-run, a fourth started later; 60 tasks whose harvests land a branch each: 57 of a scripted worker and 3 of the real Codex CLI, through each host's relay to one fixture model that answers each conversation on its own (the interrupt test runs Codex too); a taken-over task resumes from the database's replica of its last stable checkpoint, imported by the taker's own launcher; the hosts share one machine's kernel, filesystem and repository path (a real second host would need the repository at the same path)"},
		{Name: "real_repositories", Proves: "the main job lands fixes in real open-source repositories of four ecosystems, each on its own environment and setup, verified there, and a second run on the same lockfiles fetches nothing", Tests: []Run{
			{"./kernel/cmd/autonomic", []string{"TestRealRepositories"}},
		}, Scope: "four real repositories kept as git bundles (a Go module with third-party modules, a Node package tested with its npm devDependency, a Python package tested with Debian's pytest, a C library built and tested with make; each leaving ignored output in its tree), each target on the dev environment built from Debian packages by mmdebstrap with the agent CLIs layered on; the real Codex CLI driven by a scripted fixture model (run the tests, one apply_patch, run them again), the setup (go mod vendor, npm ci) through the episode's egress proxy to the real registries, automatic verification in a clean domain on the same environment and layer; one kernel on one machine"},
	}
}
