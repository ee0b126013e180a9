// Package scenario is the reference coding-agent scenario (issue 7): a
// fixture repository with one failing test, files the policy forbids and a
// prompt injection; a scripted agent; a fixture semantic model that rates
// everything safe; and a driver that runs the normal and the hostile
// episode through a running kernel's operator API and checks every step.
//
// Invariant: the driver holds no authority. It reaches the kernel only as
// an operator does (the API socket), and the authoritative repository only
// read-only with git, so what it reports is what the kernel did. The gate
// (gates.TestCodingAgentScenario) and `make demo` run the same code.
package scenario
