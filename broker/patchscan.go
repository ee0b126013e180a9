package broker

import (
	"bytes"
	"compress/zlib"
	"io"
	"strconv"
	"strings"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// patchScan is what a patch declares before git reads it: whether it
// carries binary hunks, and how many bytes its binary results and added
// text lines amount to. A binary hunk states its inflated size in its
// header and a delta states its result's size in its first bytes, so a
// patch that would expand to gigabytes inside git apply is refused here,
// before git runs and before any object is written.
type patchScan struct {
	Binary bool
	// ResultBytes is the sum of every forward binary hunk's result (a
	// literal's size, a delta's target size) and every added text line.
	ResultBytes int64
	// LargestHunk is the largest inflated size any binary hunk (forward or
	// reverse) declares: git allocates it while parsing.
	LargestHunk int64
}

// scanPatch reads the patch's binary hunk headers. It is stricter than git:
// a header git might read differently (signs, spaces, overflow) is refused.
func scanPatch(patch []byte) (patchScan, error) {
	var s patchScan
	lines := bytes.SplitAfter(patch, []byte("\n"))
	for i := 0; i < len(lines); i++ {
		line := strings.TrimRight(string(lines[i]), "\r\n")
		switch {
		case strings.HasPrefix(line, "+") && !strings.HasPrefix(line, "+++ "):
			s.ResultBytes += int64(len(lines[i]) - 1)
			if strings.IndexByte(line, 0) >= 0 {
				// A NUL in a text hunk: git's own test reads only a file's
				// first 8000 bytes, so a binary file can arrive as text.
				// Binary is binary wherever the NUL is.
				s.Binary = true
			}
		case strings.HasPrefix(line, "Binary files ") || line == "Binary patch":
			// No data: git would take the result from the object database.
			return s, protocol.Errorf(protocol.CodeInvalidField, "binary patch without data")
		case line == "GIT binary patch":
			s.Binary = true
			for hunk := 0; hunk < 2 && i+1 < len(lines); hunk++ {
				head := strings.TrimRight(string(lines[i+1]), "\r\n")
				method, size, ok := strings.Cut(head, " ")
				if !ok || (method != "literal" && method != "delta") {
					if hunk == 0 {
						return s, protocol.Errorf(protocol.CodeInvalidField, "binary hunk header")
					}
					break // the reverse hunk is optional
				}
				n, err := strconv.ParseInt(size, 10, 64)
				if err != nil || n < 0 || size != strconv.FormatInt(n, 10) {
					return s, protocol.Errorf(protocol.CodeInvalidField, "binary hunk size")
				}
				i++
				var data bytes.Buffer
				for i+1 < len(lines) {
					l := strings.TrimRight(string(lines[i+1]), "\r\n")
					i++
					if l == "" {
						break
					}
					if err := b85line(&data, l); err != nil {
						return s, err
					}
				}
				s.LargestHunk = max(s.LargestHunk, n)
				if hunk > 0 {
					continue
				}
				result := n
				if method == "delta" {
					if result, err = deltaTarget(data.Bytes()); err != nil {
						return s, err
					}
				}
				s.ResultBytes += result
			}
		}
		if s.ResultBytes < 0 || s.LargestHunk < 0 {
			return s, protocol.Errorf(protocol.CodeInvalidField, "binary hunk size")
		}
	}
	return s, nil
}

// b85line decodes one line of a git binary hunk: a length character
// ('A'–'Z' 1–26, 'a'–'z' 27–52), then base85 in groups of five.
func b85line(out *bytes.Buffer, l string) error {
	c := l[0]
	var n int
	switch {
	case c >= 'A' && c <= 'Z':
		n = int(c-'A') + 1
	case c >= 'a' && c <= 'z':
		n = int(c-'a') + 27
	default:
		return protocol.Errorf(protocol.CodeInvalidField, "binary hunk line")
	}
	enc := l[1:]
	if len(enc) != (n+3)/4*5 {
		return protocol.Errorf(protocol.CodeInvalidField, "binary hunk line")
	}
	var dec []byte
	for j := 0; j < len(enc); j += 5 {
		var acc uint64
		for k := range 5 {
			v := strings.IndexByte(b85chars, enc[j+k])
			if v < 0 {
				return protocol.Errorf(protocol.CodeInvalidField, "binary hunk line")
			}
			acc = acc*85 + uint64(v)
		}
		if acc > 0xffffffff {
			return protocol.Errorf(protocol.CodeInvalidField, "binary hunk line")
		}
		dec = append(dec, byte(acc>>24), byte(acc>>16), byte(acc>>8), byte(acc))
	}
	out.Write(dec[:n])
	return nil
}

// b85chars is git's base85 alphabet (base85.c).
const b85chars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"

// deltaTarget reads a git delta's header (source size, then target size,
// both little-endian base-128) from the first inflated bytes only.
func deltaTarget(deflated []byte) (int64, error) {
	zr, err := zlib.NewReader(bytes.NewReader(deflated))
	if err != nil {
		return 0, protocol.Errorf(protocol.CodeInvalidField, "binary delta")
	}
	head := make([]byte, 20)
	n, _ := io.ReadFull(zr, head)
	head = head[:n]
	var sizes [2]int64
	for k := range sizes {
		var v uint64
		shift := 0
		for {
			if len(head) == 0 || shift > 56 {
				return 0, protocol.Errorf(protocol.CodeInvalidField, "binary delta header")
			}
			c := head[0]
			head = head[1:]
			v |= uint64(c&0x7f) << shift
			shift += 7
			if c&0x80 == 0 {
				break
			}
		}
		if v > 1<<62 {
			return 0, protocol.Errorf(protocol.CodeInvalidField, "binary delta header")
		}
		sizes[k] = int64(v)
	}
	return sizes[1], nil
}
