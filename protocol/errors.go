package protocol

import (
	"errors"
	"fmt"
)

// Code names one entry of the closed error catalogue.
type Code string

// Error is the only error shape that crosses a process boundary.
type Error struct {
	Code      Code   `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Is matches any *Error with the same code, so errors.Is(err, ErrX) works on
// wrapped catalogue errors.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

type entry struct {
	message   string
	retryable bool
}

// The catalogue. Messages are fixed text: they never embed caller data.
const (
	// Framing and admission (both protocols).
	CodeFrameTooLarge      Code = "frame_too_large"
	CodeFrameTruncated     Code = "frame_truncated"
	CodeFrameTimeout       Code = "frame_timeout"
	CodeNotUTF8            Code = "not_utf8"
	CodeMalformedJSON      Code = "malformed_json"
	CodeDuplicateKey       Code = "duplicate_key"
	CodeTooDeep            Code = "too_deep"
	CodeTooManyNodes       Code = "too_many_nodes"
	CodeTrailingData       Code = "trailing_data"
	CodeUnsupportedVersion Code = "unsupported_version"
	CodeUnknownAction      Code = "unknown_action"
	CodeUnknownField       Code = "unknown_field"
	CodeMissingField       Code = "missing_field"
	CodeInvalidField       Code = "invalid_field"

	// Launcher.
	CodeConfigInvalid      Code = "config_invalid"
	CodeNotPrivileged      Code = "not_privileged"
	CodeDomainExists       Code = "domain_exists"
	CodeDomainNotFound     Code = "domain_not_found"
	CodeDomainNotRunning   Code = "domain_not_running"
	CodeDomainBusy         Code = "domain_busy"
	CodePathUnsafe         Code = "path_unsafe"
	CodeRootfsMismatch     Code = "rootfs_mismatch"
	CodeRootfsMissing      Code = "rootfs_missing"
	CodeWorkspaceNotFound  Code = "workspace_not_found"
	CodeCheckpointNotFound Code = "checkpoint_not_found"
	CodeCheckpointCorrupt  Code = "checkpoint_corrupt"
	CodeCheckpointUnsafe   Code = "checkpoint_unsafe"
	CodeCheckpointTooLarge Code = "checkpoint_too_large"
	CodeLimitExceeded      Code = "limit_exceeded"
	CodeUIDPoolExhausted   Code = "uid_pool_exhausted"
	CodeCgroupFailed       Code = "cgroup_failed"
	CodeNamespaceFailed    Code = "namespace_failed"
	CodeMountFailed        Code = "mount_failed"
	CodeSeccompFailed      Code = "seccomp_failed"
	CodeSeccompUnsupported Code = "seccomp_unsupported"
	CodeExecFailed         Code = "exec_failed"
	CodeFreezeTimeout      Code = "freeze_timeout"
	CodeKillTimeout        Code = "kill_timeout"
	CodeLauncherFailed     Code = "launcher_failed"

	CodeCgroupForeign       Code = "cgroup_foreign"
	CodeCheckpointStoreFull Code = "checkpoint_store_full"

	// Authority and effects (broker, store).
	CodeAuthorityUnavailable  Code = "authority_unavailable"
	CodeStaleRequestEpoch     Code = "stale_request_epoch"
	CodeStaleAuthority        Code = "stale_authority"
	CodeEffectBrokerSaturated Code = "effect_broker_saturated"
	CodeIllegalTransition     Code = "illegal_transition"
	CodeNotFound              Code = "not_found"
	CodeForbidden             Code = "forbidden"
	CodeInternal              Code = "internal"

	// Worker (broker) protocol and effect adapters.
	CodePeerRefused       Code = "peer_refused"
	CodeCommitUnknown     Code = "commit_unknown"
	CodeEffectFailed      Code = "effect_failed"
	CodeApprovalRequired  Code = "approval_required"
	CodeApprovalInvalid   Code = "approval_invalid"
	CodeRedirectRefused   Code = "redirect_refused"
	CodeResponseTooLarge  Code = "response_too_large"
	CodeTargetTimeout     Code = "target_timeout"
	CodeAddressRefused    Code = "address_refused"
	CodeTargetUnavailable Code = "target_unavailable"
	CodeRateLimited       Code = "rate_limited"
	CodeRefMoved          Code = "ref_moved"
	CodeDigestMismatch    Code = "digest_mismatch"

	// Inference relay (kernel/relay).
	CodeRouteRefused    Code = "route_refused"
	CodeModelRefused    Code = "model_refused"
	CodeBudgetExhausted Code = "budget_exhausted"
)

var catalogue = map[Code]entry{
	CodeFrameTooLarge:      {"frame length exceeds the cap for this direction", false},
	CodeFrameTruncated:     {"frame ended before its declared length", false},
	CodeFrameTimeout:       {"frame was not received before the deadline", true},
	CodeNotUTF8:            {"frame payload is not valid UTF-8", false},
	CodeMalformedJSON:      {"frame payload is not a single JSON object", false},
	CodeDuplicateKey:       {"a JSON object repeats a key", false},
	CodeTooDeep:            {"JSON nesting exceeds the depth limit", false},
	CodeTooManyNodes:       {"JSON document exceeds the node limit", false},
	CodeTrailingData:       {"bytes follow the JSON document", false},
	CodeUnsupportedVersion: {"protocol version is not spoken here", false},
	CodeUnknownAction:      {"action is not part of this protocol", false},
	CodeUnknownField:       {"field is not allowed for this action", false},
	CodeMissingField:       {"a required field is missing", false},
	CodeInvalidField:       {"a field has an invalid type or value", false},

	CodeConfigInvalid:      {"launcher configuration is missing, unsafe or invalid", false},
	CodeNotPrivileged:      {"launcher is not running with the privilege it needs", false},
	CodeDomainExists:       {"a domain with this id already exists", false},
	CodeDomainNotFound:     {"no domain with this id exists", false},
	CodeDomainNotRunning:   {"the domain has no running processes", false},
	CodeDomainBusy:         {"another request holds this domain", true},
	CodePathUnsafe:         {"a path resolved to a symlink, wrong type or outside its root", false},
	CodeRootfsMismatch:     {"rootfs manifest digest differs from the configured one", false},
	CodeRootfsMissing:      {"the configured rootfs directory does not exist; re-run the install (make install) to rebuild it", false},
	CodeWorkspaceNotFound:  {"no workspace with this id exists", false},
	CodeCheckpointNotFound: {"no checkpoint with this digest exists", false},
	CodeCheckpointCorrupt:  {"checkpoint content does not match its digest", false},
	CodeCheckpointUnsafe:   {"checkpoint archive contains a refused entry", false},
	CodeCheckpointTooLarge: {"checkpoint exceeds the configured size, entry or depth cap", false},
	CodeLimitExceeded:      {"requested limit exceeds the configured maximum", false},
	CodeUIDPoolExhausted:   {"no free uid range is left in the pool", true},
	CodeCgroupFailed:       {"cgroup operation failed", true},
	CodeNamespaceFailed:    {"namespace creation failed", false},
	CodeMountFailed:        {"domain mount setup failed", false},
	CodeSeccompFailed:      {"seccomp program could not be installed", false},
	CodeSeccompUnsupported: {"host lacks a seccomp feature the request needs", false},
	CodeExecFailed:         {"worker program could not be executed", false},
	CodeFreezeTimeout:      {"cgroup did not reach the requested freeze state in time", true},
	CodeKillTimeout:        {"cgroup was not empty before the deadline", true},
	CodeLauncherFailed:     {"launcher failed for a reason outside the catalogue", false},

	CodeCgroupForeign:       {"a cgroup of this name exists that the launcher did not make", false},
	CodeCheckpointStoreFull: {"checkpoint store is at its configured total cap", false},

	CodeAuthorityUnavailable:  {"the authority store is unreachable or the outcome is unknown", true},
	CodeStaleRequestEpoch:     {"request epoch is not the episode's current epoch", false},
	CodeStaleAuthority:        {"authority changed since the effect was prepared", false},
	CodeEffectBrokerSaturated: {"too many effect requests are in flight", true},
	CodeIllegalTransition:     {"state transition is not allowed", false},
	CodeNotFound:              {"the named object does not exist", false},
	CodeForbidden:             {"the request is outside the granted capability", false},
	CodeInternal:              {"internal error", false},

	CodePeerRefused:       {"the connection does not come from the episode's current domain", false},
	CodeCommitUnknown:     {"the effect's outcome cannot be proven; it awaits reconciliation", false},
	CodeEffectFailed:      {"the adapter did not perform the effect", false},
	CodeApprovalRequired:  {"a signed human approval of this exact revision is required", false},
	CodeApprovalInvalid:   {"the approval does not verify for this exact effect revision", false},
	CodeRedirectRefused:   {"the target answered with a redirect, which is never followed", false},
	CodeResponseTooLarge:  {"the target's response exceeds the configured cap", false},
	CodeTargetTimeout:     {"the target did not answer completely before the deadline", true},
	CodeAddressRefused:    {"the target's name resolved to an address that is not allowed", false},
	CodeTargetUnavailable: {"the target could not be reached", true},
	CodeRateLimited:       {"the target's rate limit is exhausted", true},
	CodeRefMoved:          {"the ref no longer points at the expected object", false},
	CodeDigestMismatch:    {"the fetched bytes do not match the digest the registry published", false},

	CodeRouteRefused:    {"the relay forwards only the provider's inference routes", false},
	CodeModelRefused:    {"the model is not allowed by the policy and the provider", false},
	CodeBudgetExhausted: {"the episode's inference budget is exhausted", false},
}

// E returns the catalogue error for code. An unknown code yields
// CodeInternal, so a typo can never put an unlisted code on the wire.
func E(code Code) *Error {
	c, ok := catalogue[code]
	if !ok {
		code, c = CodeInternal, catalogue[CodeInternal]
	}
	return &Error{Code: code, Message: c.message, Retryable: c.retryable}
}

// Errorf returns the catalogue error for code, wrapping a local cause that
// stays on this side of the boundary (for logs), never on the wire.
func Errorf(code Code, format string, args ...any) error {
	return &wrapped{wire: E(code), cause: fmt.Errorf(format, args...)}
}

type wrapped struct {
	wire  *Error
	cause error
}

func (w *wrapped) Error() string   { return w.wire.Error() + ": " + w.cause.Error() }
func (w *wrapped) Unwrap() []error { return []error{w.wire, w.cause} }

// AsWire reduces any error to its catalogue form: the first *Error in its
// chain, or CodeInternal. This is the only way an error reaches the wire.
func AsWire(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return E(e.Code)
	}
	return E(CodeInternal)
}

// Known reports whether code is in the catalogue.
func Known(code Code) bool {
	_, ok := catalogue[code]
	return ok
}

// Codes lists the catalogue, for documentation tests.
func Codes() []Code {
	out := make([]Code, 0, len(catalogue))
	for c := range catalogue {
		out = append(out, c)
	}
	return out
}
