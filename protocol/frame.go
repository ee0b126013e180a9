package protocol

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"time"
)

// Frame caps, per protocol and direction. A reader is always given the cap of
// the direction it reads, so a peer can never make us allocate more than that.
const (
	// LauncherRequestMax bounds kernel → launcher frames. The largest request
	// is create with a 4096-instruction seccomp program (≈44 KiB in base64).
	LauncherRequestMax = 256 << 10
	// LauncherResponseMax bounds launcher → kernel frames.
	LauncherResponseMax = 64 << 10
	// WorkerRequestMax and WorkerResponseMax bound the broker protocol.
	WorkerRequestMax  = 1 << 20
	WorkerResponseMax = 1 << 20
)

// frameHeader is the 4-byte big-endian payload length.
const frameHeader = 4

type deadliner interface{ SetReadDeadline(time.Time) error }

// ReadFrame reads one frame of at most max payload bytes. When deadline is
// non-zero and r supports read deadlines, the whole frame must arrive before
// it; otherwise the caller bounds the read some other way.
func ReadFrame(r io.Reader, max int, deadline time.Time) ([]byte, error) {
	if d, ok := r.(deadliner); ok && !deadline.IsZero() {
		if err := d.SetReadDeadline(deadline); err == nil {
			defer d.SetReadDeadline(time.Time{})
		}
	}
	var hdr [frameHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, frameReadError(err, true)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 {
		return nil, Errorf(CodeMalformedJSON, "empty frame")
	}
	// Compare before converting so a 4 GiB length cannot wrap on 32-bit.
	if uint64(n) > uint64(max) {
		return nil, Errorf(CodeFrameTooLarge, "frame of %d bytes, cap %d", n, max)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, frameReadError(err, false)
	}
	return buf, nil
}

// errNoFrame is wrapped when the stream ended cleanly before a frame began.
var errNoFrame = errors.New("end of stream before a frame")

// IsEOF reports whether err means the peer closed the stream cleanly
// between frames.
func IsEOF(err error) bool { return errors.Is(err, errNoFrame) }

func frameReadError(err error, atStart bool) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return Errorf(CodeFrameTimeout, "reading frame: %w", err)
	case atStart && errors.Is(err, io.EOF):
		return Errorf(CodeFrameTruncated, "%w", errNoFrame)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(CodeFrameTruncated, "reading frame: %w", err)
	}
	return Errorf(CodeFrameTruncated, "reading frame: %w", err)
}

// WriteFrame writes payload as one frame, refusing payloads above max so a
// sender can never emit what its peer must refuse.
func WriteFrame(w io.Writer, payload []byte, max int) error {
	if len(payload) == 0 {
		return Errorf(CodeMalformedJSON, "empty payload")
	}
	if len(payload) > max || uint64(len(payload)) > math.MaxUint32 {
		return Errorf(CodeFrameTooLarge, "payload of %d bytes, cap %d", len(payload), max)
	}
	buf := make([]byte, frameHeader+len(payload))
	binary.BigEndian.PutUint32(buf, uint32(len(payload)))
	copy(buf[frameHeader:], payload)
	// One write per frame, so a frame is never split between two writers
	// as long as the caller serialises calls (the launcher's monitor holds
	// a mutex around each).
	_, err := w.Write(buf)
	return err
}
