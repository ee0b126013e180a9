package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
)

// WorkerVersion is the worker (broker) protocol version this build speaks.
const WorkerVersion = 1

// WorkerVersions lists every worker protocol version this build speaks.
func WorkerVersions() []int { return []int{WorkerVersion} }

// Worker actions: what a worker may ask of the effect broker.
const (
	WorkerPrepare       = "prepare"
	WorkerEvaluate      = "evaluate"
	WorkerCommit        = "commit"
	WorkerAbort         = "abort"
	WorkerStatus        = "status"
	WorkerFetchResponse = "fetch_response"
)

// Wire limits of the worker protocol (see README.md §11).
const (
	// MaxWorkerPayload bounds the decoded payload of one prepare. Its
	// base64 form (4/3 of it) plus the rest of the frame stays under
	// WorkerRequestMax.
	MaxWorkerPayload = 512 << 10
	// MaxWorkerTarget bounds the target object's JSON text.
	MaxWorkerTarget = 16 << 10
	// MaxWorkerChunk bounds one fetch_response chunk (decoded bytes).
	MaxWorkerChunk = 256 << 10
	// MaxRevision bounds an effect revision.
	MaxRevision = 1 << 30
)

// ValidUUID reports whether s is a UUID in canonical lower-case form, the
// only form the worker protocol admits, so one id has one spelling.
func ValidUUID(s string) bool { return uuidPattern.MatchString(s) }

// ValidTargetID reports whether s can name a configured target.
func ValidTargetID(s string) bool { return targetIDPattern.MatchString(s) }

// ValidKind reports whether s can name an effect kind.
func ValidKind(s string) bool { return kindPattern.MatchString(s) }

// WorkerRequest is every field any worker action may carry; which are
// allowed for which action is WorkerRequestSchema's business.
type WorkerRequest struct {
	Protocol  int    `json:"protocol"`
	RequestID string `json:"request_id"`
	Epoch     int64  `json:"epoch"`
	Action    string `json:"action"`

	LeaseID    string          `json:"lease_id,omitempty"`
	Kind       string          `json:"kind,omitempty"`
	TargetID   string          `json:"target_id,omitempty"`
	Target     json.RawMessage `json:"target,omitempty"`
	PayloadB64 string          `json:"payload_b64,omitempty"`

	EffectID string    `json:"effect_id,omitempty"`
	Revision int       `json:"revision,omitempty"`
	Offset   int64     `json:"offset,omitempty"`
	Limit    int       `json:"limit,omitempty"`
	Approval *Approval `json:"approval,omitempty"`
}

// Approval is a human decision signed with Ed25519 over
// "autonomic.human-approval.v1\n" followed by the RFC 8785 form of Document.
type Approval struct {
	Document  ApprovalDocument `json:"document"`
	Signature string           `json:"signature"` // standard base64 of 64 bytes
	KeyID     string           `json:"key_id"`
}

// ApprovalDocument binds a decision to one exact effect revision.
type ApprovalDocument struct {
	EffectID       string `json:"effect_id"`
	EffectRevision int    `json:"effect_revision"`
	EpisodeID      string `json:"episode_id"`
	Epoch          int64  `json:"epoch"`
	PayloadDigest  string `json:"payload_digest"`
	Decision       string `json:"decision"` // "allow" or "deny"
}

// ApprovalContext prefixes the canonical document in what is signed, so a
// signature made for any other purpose never verifies as an approval.
const ApprovalContext = "autonomic.human-approval.v1\n"

var byEffect = []string{"request_id", "epoch", "effect_id", "revision"}

// workerRequests is WorkerRequestSchema built once, for the decoder: the
// exported function returns a table the caller may change.
func workerRequests() *Schema { return workerRequestTable.get(WorkerRequestSchema) }

var workerRequestTable schemaOnce

// WorkerRequestSchema is the broker's admission table: one row per action,
// listing the exact fields that action accepts.
func WorkerRequestSchema() *Schema {
	return &Schema{
		Versions:      WorkerVersions(),
		Discriminator: "action",
		Limits:        Limits{MaxDepth: 8, MaxNodes: 1024},
		Kinds: map[string]Fields{
			WorkerPrepare: {
				Required: []string{"request_id", "epoch", "lease_id", "kind", "target_id", "target"},
				Optional: []string{"payload_b64", "effect_id", "revision"},
			},
			WorkerEvaluate:      {Required: byEffect, Optional: []string{"approval"}},
			WorkerCommit:        {Required: byEffect},
			WorkerAbort:         {Required: byEffect},
			WorkerStatus:        {Required: []string{"request_id", "epoch", "effect_id"}},
			WorkerFetchResponse: {Required: []string{"request_id", "epoch", "effect_id"}, Optional: []string{"offset", "limit"}},
		},
	}
}

// DecodeWorkerRequest admits, decodes and validates one request frame.
func DecodeWorkerRequest(b []byte) (*WorkerRequest, error) {
	var r WorkerRequest
	if _, err := workerRequests().decode(b, &r); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Validate checks every field value. The client calls it before sending, so
// it never emits what the broker must refuse.
func (r *WorkerRequest) Validate() error {
	if r.Protocol != WorkerVersion {
		return Errorf(CodeUnsupportedVersion, "version %d", r.Protocol)
	}
	if _, ok := workerRequests().Kinds[r.Action]; !ok {
		return Errorf(CodeUnknownAction, "%q", r.Action)
	}
	if !requestIDPattern.MatchString(r.RequestID) {
		return Errorf(CodeInvalidField, "request_id")
	}
	if r.Epoch < 1 {
		return Errorf(CodeInvalidField, "epoch")
	}
	if r.Action == WorkerPrepare {
		return r.validatePrepare()
	}
	if !ValidUUID(r.EffectID) {
		return Errorf(CodeInvalidField, "effect_id")
	}
	switch r.Action {
	case WorkerEvaluate, WorkerCommit, WorkerAbort:
		if r.Revision < 1 || r.Revision > MaxRevision {
			return Errorf(CodeInvalidField, "revision")
		}
	}
	if r.Offset < 0 {
		return Errorf(CodeInvalidField, "offset")
	}
	if r.Limit < 0 || r.Limit > MaxWorkerChunk {
		return Errorf(CodeInvalidField, "limit")
	}
	if r.Approval != nil {
		return r.Approval.Validate()
	}
	return nil
}

func (r *WorkerRequest) validatePrepare() error {
	if !ValidUUID(r.LeaseID) {
		return Errorf(CodeInvalidField, "lease_id")
	}
	if !ValidKind(r.Kind) {
		return Errorf(CodeInvalidField, "kind")
	}
	if !ValidTargetID(r.TargetID) {
		return Errorf(CodeInvalidField, "target_id")
	}
	t := bytes.TrimSpace(r.Target)
	if len(t) == 0 || t[0] != '{' || len(r.Target) > MaxWorkerTarget {
		return Errorf(CodeInvalidField, "target")
	}
	if _, err := r.Payload(); err != nil {
		return err
	}
	// A re-proposal names the effect and the revision it replaces; a new
	// proposal names neither.
	if (r.EffectID == "") != (r.Revision == 0) {
		return Errorf(CodeMissingField, "effect_id and revision go together")
	}
	if r.EffectID != "" && !ValidUUID(r.EffectID) {
		return Errorf(CodeInvalidField, "effect_id")
	}
	if r.Revision < 0 || r.Revision > MaxRevision {
		return Errorf(CodeInvalidField, "revision")
	}
	return nil
}

// Payload returns the decoded payload. Only the canonical padded encoding
// is admitted, so one payload has exactly one wire form.
func (r *WorkerRequest) Payload() ([]byte, error) {
	if len(r.PayloadB64) > base64.StdEncoding.EncodedLen(MaxWorkerPayload) {
		return nil, Errorf(CodeInvalidField, "payload_b64")
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(r.PayloadB64)
	if err != nil || len(raw) > MaxWorkerPayload || base64.StdEncoding.EncodeToString(raw) != r.PayloadB64 {
		return nil, Errorf(CodeInvalidField, "payload_b64")
	}
	return raw, nil
}

// Validate checks an approval's shape; the broker checks its signature.
func (a *Approval) Validate() error {
	sig, err := base64.StdEncoding.Strict().DecodeString(a.Signature)
	if err != nil || len(sig) != 64 || base64.StdEncoding.EncodeToString(sig) != a.Signature {
		return Errorf(CodeInvalidField, "approval.signature")
	}
	if !keyIDPattern.MatchString(a.KeyID) {
		return Errorf(CodeInvalidField, "approval.key_id")
	}
	d := a.Document
	switch {
	case !ValidUUID(d.EffectID):
		return Errorf(CodeInvalidField, "approval.document.effect_id")
	case d.EffectRevision < 1 || d.EffectRevision > MaxRevision:
		return Errorf(CodeInvalidField, "approval.document.effect_revision")
	case !ValidUUID(d.EpisodeID):
		return Errorf(CodeInvalidField, "approval.document.episode_id")
	case d.Epoch < 1:
		return Errorf(CodeInvalidField, "approval.document.epoch")
	case !sha256Digest.MatchString(d.PayloadDigest):
		return Errorf(CodeInvalidField, "approval.document.payload_digest")
	case d.Decision != "allow" && d.Decision != "deny":
		return Errorf(CodeInvalidField, "approval.document.decision")
	}
	return nil
}

// ClassName returns the wire name of a brokered effect class, or "" if the
// class is never brokered. A switch, not a package map: the launcher links
// this package, and a map would be initialised in every launcher process;
// as it is, no code of the worker half is in the launcher's binary.
func ClassName(class int) string {
	switch class {
	case 2:
		return "class_2_external_observable_or_compensatable"
	case 3:
		return "class_3_authoritative_external_mutation"
	case 4:
		return "class_4_irreversible_high_impact"
	}
	return ""
}

// WorkerResponse is the broker's one answer to one request. ok says which
// of result or error is present; exactly one is.
type WorkerResponse struct {
	Protocol  int           `json:"protocol"`
	RequestID string        `json:"request_id"`
	OK        bool          `json:"ok"`
	Result    *EffectResult `json:"result,omitempty"`
	Error     *Error        `json:"error,omitempty"`
}

// EffectResult is an effect as the worker may see it: no host path, URL or
// credential ever appears in it.
type EffectResult struct {
	ID            string          `json:"id"`
	EpisodeID     string          `json:"episode_id"`
	Epoch         int64           `json:"epoch"`
	Revision      int             `json:"revision"`
	Kind          string          `json:"kind"`
	Class         string          `json:"class"`
	TargetID      string          `json:"target_id"`
	State         string          `json:"state"`
	PayloadDigest string          `json:"payload_digest"`
	Receipt       json.RawMessage `json:"receipt,omitempty"`
	Chunk         *Chunk          `json:"chunk,omitempty"`
}

// Chunk is one bounded piece of a stored response body.
type Chunk struct {
	Offset    int64  `json:"offset"`
	Length    int    `json:"length"`
	TotalSize int64  `json:"total_size"`
	Digest    string `json:"digest"`
	DataB64   string `json:"data_b64"`
	EOF       bool   `json:"eof"`
}

// WorkerResponseLimits bound a broker response document.
func WorkerResponseLimits() Limits { return Limits{MaxDepth: 8, MaxNodes: 4096} }

// DecodeWorkerResponse admits and decodes one broker frame. An error whose
// code is not in the catalogue is itself refused.
func DecodeWorkerResponse(b []byte) (*WorkerResponse, error) {
	var r WorkerResponse
	if err := checkDecode(b, WorkerResponseLimits(), &r); err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	return &r, nil
}

// check judges a decoded response's values.
func (r *WorkerResponse) check() error {
	if r.Protocol != WorkerVersion {
		return Errorf(CodeUnsupportedVersion, "version %d", r.Protocol)
	}
	if r.RequestID != "" && !requestIDPattern.MatchString(r.RequestID) {
		return Errorf(CodeInvalidField, "request_id")
	}
	if r.OK {
		if r.Result == nil || r.Error != nil || r.RequestID == "" {
			return Errorf(CodeInvalidField, "result")
		}
		return r.Result.validate()
	}
	if r.Error == nil || r.Result != nil || !Known(r.Error.Code) {
		return Errorf(CodeInvalidField, "error")
	}
	// The local catalogue's text, never the peer's.
	r.Error = E(r.Error.Code)
	return nil
}

func (e *EffectResult) validate() error {
	switch {
	case !ValidUUID(e.ID) || !ValidUUID(e.EpisodeID):
		return Errorf(CodeInvalidField, "result.id")
	case e.Epoch < 1 || e.Revision < 1 || e.Revision > MaxRevision:
		return Errorf(CodeInvalidField, "result.revision")
	case !ValidKind(e.Kind) || !ValidTargetID(e.TargetID) || !kindPattern.MatchString(e.State):
		return Errorf(CodeInvalidField, "result.kind")
	case !sha256Digest.MatchString(e.PayloadDigest):
		return Errorf(CodeInvalidField, "result.payload_digest")
	}
	if e.Class != ClassName(2) && e.Class != ClassName(3) && e.Class != ClassName(4) {
		return Errorf(CodeInvalidField, "result.class")
	}
	if len(e.Receipt) > 0 && bytes.TrimSpace(e.Receipt)[0] != '{' {
		return Errorf(CodeInvalidField, "result.receipt")
	}
	if c := e.Chunk; c != nil {
		data, err := base64.StdEncoding.Strict().DecodeString(c.DataB64)
		if err != nil || len(data) != c.Length || c.Length > MaxWorkerChunk || c.Offset < 0 || c.TotalSize < 0 ||
			c.Offset+int64(c.Length) > c.TotalSize || c.EOF != (c.Offset+int64(c.Length) == c.TotalSize) ||
			!sha256Digest.MatchString(c.Digest) || base64.StdEncoding.EncodeToString(data) != c.DataB64 {
			return Errorf(CodeInvalidField, "result.chunk")
		}
	}
	return nil
}
