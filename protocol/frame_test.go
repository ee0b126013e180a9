package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func header(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

func framed(payload []byte) []byte { return append(header(uint32(len(payload))), payload...) }

func wantCode(t *testing.T, err error, want Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", want)
	}
	if got := AsWire(err).Code; got != want {
		t.Fatalf("got %s (%v), want %s", got, err, want)
	}
}

func TestReadFrame(t *testing.T) {
	const max = 64
	body := []byte(`{"a":1}`)
	cases := []struct {
		name  string
		in    []byte
		want  []byte
		code  Code
		isEOF bool
	}{
		{name: "one frame", in: framed(body), want: body},
		{name: "exactly at cap", in: framed(bytes.Repeat([]byte("x"), max)), want: bytes.Repeat([]byte("x"), max)},
		{name: "one byte over cap", in: append(header(max+1), bytes.Repeat([]byte("x"), max+1)...), code: CodeFrameTooLarge},
		{name: "0xFFFFFFFF length", in: header(0xFFFFFFFF), code: CodeFrameTooLarge},
		{name: "0x80000000 length", in: header(0x80000000), code: CodeFrameTooLarge},
		{name: "zero length", in: header(0), code: CodeMalformedJSON},
		{name: "clean EOF before a frame", in: nil, code: CodeFrameTruncated, isEOF: true},
		{name: "short header 1", in: []byte{0}, code: CodeFrameTruncated},
		{name: "short header 3", in: []byte{0, 0, 0}, code: CodeFrameTruncated},
		{name: "header only", in: header(7), code: CodeFrameTruncated},
		{name: "short body", in: append(header(7), body[:6]...), code: CodeFrameTruncated},
		{name: "trailing bytes stay unread", in: append(framed(body), 0xde, 0xad), want: body},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadFrame(bytes.NewReader(tc.in), max, time.Time{})
			if tc.code != "" {
				wantCode(t, err, tc.code)
				if IsEOF(err) != tc.isEOF {
					t.Fatalf("IsEOF = %v, want %v", IsEOF(err), tc.isEOF)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// A reader that returns an error that is neither EOF nor a deadline.
type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("EIO") }

func TestReadFrameOtherErrorIsTruncated(t *testing.T) {
	_, err := ReadFrame(failingReader{}, 10, time.Time{})
	wantCode(t, err, CodeFrameTruncated)
	if IsEOF(err) {
		t.Fatal("an I/O error is not a clean end of stream")
	}
}

func TestReadFrameSequence(t *testing.T) {
	var stream bytes.Buffer
	for _, p := range []string{`{"n":1}`, `{"n":2}`} {
		if err := WriteFrame(&stream, []byte(p), 100); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{`{"n":1}`, `{"n":2}`} {
		got, err := ReadFrame(&stream, 100, time.Time{})
		if err != nil || string(got) != want {
			t.Fatalf("got %q, %v; want %q", got, err, want)
		}
	}
	if _, err := ReadFrame(&stream, 100, time.Time{}); !IsEOF(err) {
		t.Fatalf("after the last frame: %v, want IsEOF", err)
	}
}

func TestReadFrameDeadlineOnPipe(t *testing.T) {
	cases := []struct {
		name  string
		write []byte
	}{
		{"nothing written", nil},
		{"half a header", []byte{0, 0}},
		{"header, half a body", append(header(10), `{"a"`...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			if len(tc.write) > 0 {
				if _, err := w.Write(tc.write); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			_, err = ReadFrame(r, 100, time.Now().Add(50*time.Millisecond))
			wantCode(t, err, CodeFrameTimeout)
			if !E(CodeFrameTimeout).Retryable {
				t.Error("frame_timeout should be retryable")
			}
			if time.Since(start) > 2*time.Second {
				t.Fatal("deadline not honoured")
			}
			// The deadline is cleared afterwards: a later read blocks only
			// until data arrives.
			go func() { _ = WriteFrame(w, []byte(`{}`), 100) }()
			if len(tc.write) == 0 {
				if b, err := ReadFrame(r, 100, time.Time{}); err != nil || string(b) != `{}` {
					t.Fatalf("read after deadline: %q, %v", b, err)
				}
			}
		})
	}
}

func TestWriteFrame(t *testing.T) {
	cases := []struct {
		name    string
		payload []byte
		max     int
		code    Code
	}{
		{"ok", []byte(`{}`), 10, ""},
		{"exactly at cap", bytes.Repeat([]byte("x"), 10), 10, ""},
		{"over cap", bytes.Repeat([]byte("x"), 11), 10, CodeFrameTooLarge},
		{"empty", nil, 10, CodeMalformedJSON},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := WriteFrame(&buf, tc.payload, tc.max)
			if tc.code != "" {
				wantCode(t, err, tc.code)
				if buf.Len() != 0 {
					t.Fatal("a refused frame wrote bytes")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), framed(tc.payload)) {
				t.Fatalf("wire %x", buf.Bytes())
			}
		})
	}
}

// countingWriter proves a frame goes out in one write call.
type countingWriter struct {
	calls int
	bytes.Buffer
}

func (c *countingWriter) Write(p []byte) (int, error) { c.calls++; return c.Buffer.Write(p) }

func TestWriteFrameSingleWrite(t *testing.T) {
	w := &countingWriter{}
	if err := WriteFrame(w, []byte(strings.Repeat("y", 1000)), LauncherResponseMax); err != nil {
		t.Fatal(err)
	}
	if w.calls != 1 {
		t.Fatalf("%d writes for one frame", w.calls)
	}
}

func TestCapsAreOrdered(t *testing.T) {
	// The largest valid create (a 4096-instruction program in base64 and
	// its digest) must fit the request cap with room for argv.
	prog := NewSeccompProgram(make([]byte, 8*MaxSeccompInsns))
	if need := len(prog.ProgramB64) + len(prog.SHA256) + MaxArgvBytes; need > LauncherRequestMax {
		t.Fatalf("a maximal program and argv need %d bytes, cap %d", need, LauncherRequestMax)
	}
	for _, n := range []int{LauncherRequestMax, LauncherResponseMax, WorkerRequestMax, WorkerResponseMax} {
		if n <= 0 || uint64(n) > 0xFFFFFFFF {
			t.Fatalf("cap %d does not fit the 4-byte header", n)
		}
	}
}
