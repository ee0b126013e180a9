package protocol

import "testing"

// The decoders beside their oracles (oracle_test.go), on the frames a
// broker and a kernel decode most: `go test -bench Decode -benchmem`.

var (
	benchStatus = []byte(`{"protocol":1,"request_id":"0192f0a0-0000-7000-8000-000000000001","epoch":3,"action":"status","effect_id":"0192f0a0-0000-7000-8000-0000000000aa"}`)

	benchPrepare = []byte(`{"protocol":1,"request_id":"0192f0a0-0000-7000-8000-000000000001","epoch":3,"action":"prepare",` +
		`"lease_id":"0192f0a0-0000-7000-8000-000000000002","kind":"git_commit","target_id":"repo",` +
		`"target":{"base_oid":"2f7c9d0e4b1a5c3d8e6f7a9b0c1d2e3f4a5b6c7d","ref":"refs/heads/main","message":"fix the off-by-one in calc"},` +
		`"payload_b64":"ZGlmZiAtLWdpdCBhL3NyYy9jYWxjLnNoIGIvc3JjL2NhbGMuc2gKaW5kZXggMWEyYjNjNC4uNWQ2ZTdmOCAxMDA2NDQKLS0tIGEvc3JjL2NhbGMuc2gKKysrIGIvc3JjL2NhbGMuc2gK"}`)

	benchCommitted = []byte(`{"protocol":1,"request_id":"0192f0a0-0000-7000-8000-000000000001","ok":true,"result":{` +
		`"id":"0192f0a0-0000-7000-8000-0000000000aa","episode_id":"0192f0a0-0000-7000-8000-0000000000bb","epoch":3,"revision":1,` +
		`"kind":"git_commit","class":"class_3_authoritative_external_mutation","target_id":"repo","state":"committed",` +
		`"payload_digest":"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",` +
		`"receipt":{"commit":"9b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c","ref":"refs/heads/main","parent":"2f7c9d0e4b1a5c3d8e6f7a9b0c1d2e3f4a5b6c7d","files":["src/calc.sh"]}}}`)
)

func benchDecode[T any](b *testing.B, frame []byte, decoders map[string]func([]byte) (T, error)) {
	for _, name := range []string{"old", "new"} {
		decode := decoders[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decode(frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeWorkerRequest(b *testing.B) {
	for _, f := range []struct {
		name  string
		frame []byte
	}{{"status", benchStatus}, {"prepare", benchPrepare}} {
		b.Run(f.name, func(b *testing.B) {
			benchDecode(b, f.frame, map[string]func([]byte) (*WorkerRequest, error){
				"old": oldDecodeWorkerRequest, "new": DecodeWorkerRequest,
			})
		})
	}
}

func BenchmarkDecodeWorkerResponse(b *testing.B) {
	benchDecode(b, benchCommitted, map[string]func([]byte) (*WorkerResponse, error){
		"old": oldDecodeWorkerResponse, "new": DecodeWorkerResponse,
	})
}

func BenchmarkDecodeLauncherRequest(b *testing.B) {
	benchDecode(b, js(b, validCreate()), map[string]func([]byte) (*LauncherRequest, error){
		"old": oldDecodeLauncherRequest, "new": DecodeLauncherRequest,
	})
}

// BenchmarkDecodeStrict is DecodeStrict alone, as the broker's adapters
// call it on a prepare's target.
func BenchmarkDecodeStrict(b *testing.B) {
	target := []byte(`{"base_oid":"2f7c9d0e4b1a5c3d8e6f7a9b0c1d2e3f4a5b6c7d","ref":"refs/heads/main","message":"fix the off-by-one in calc"}`)
	type gitCommit struct {
		BaseOID string `json:"base_oid"`
		Ref     string `json:"ref"`
		Message string `json:"message"`
	}
	benchDecode(b, target, map[string]func([]byte) (*gitCommit, error){
		"old": func(d []byte) (*gitCommit, error) { var v gitCommit; return &v, oldDecodeStrict(d, &v) },
		"new": func(d []byte) (*gitCommit, error) { var v gitCommit; return &v, DecodeStrict(d, &v) },
	})
}
