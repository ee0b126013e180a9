package broker

import (
	"bytes"
	"compress/zlib"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
)

// gitBinaryHunk encodes data as the body of a "GIT binary patch" hunk:
// zlib-deflated, then base85 in lines of at most 52 bytes, each led by its
// length character.
func gitBinaryHunk(data []byte) string {
	var z bytes.Buffer
	w, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	_, _ = w.Write(data)
	_ = w.Close()
	src := z.Bytes()
	var out strings.Builder
	for len(src) > 0 {
		n := min(52, len(src))
		line := src[:n]
		src = src[n:]
		if n <= 26 {
			out.WriteByte(byte('A' + n - 1))
		} else {
			out.WriteByte(byte('a' + n - 27))
		}
		for i := 0; i < n; i += 4 {
			var acc uint32
			for j := 0; j < 4; j++ {
				acc <<= 8
				if i+j < n {
					acc |= uint32(line[i+j])
				}
			}
			var enc [5]byte
			for k := 4; k >= 0; k-- {
				enc[k] = b85chars[acc%85]
				acc /= 85
			}
			out.Write(enc[:])
		}
		out.WriteByte('\n')
	}
	return out.String()
}

func gitVarint(n uint64) []byte {
	var b []byte
	for {
		c := byte(n & 0x7f)
		n >>= 7
		if n != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func blobOID(size uint64, chunks func(write func([]byte))) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", size)
	chunks(func(b []byte) { h.Write(b) })
	return hex.EncodeToString(h.Sum(nil))
}

// deltaBomb is the audit's patch: one file section creates path with
// seedSize random bytes (a literal), a second modifies the same path with
// a binary delta that copies the whole seed copies times. The patch stays
// under protocol.MaxWorkerPayload for seedSize ≈ 300 KB; the result is
// seedSize×copies bytes. It returns the patch and the result's size.
func deltaBomb(path string, seedSize, copies int) ([]byte, uint64) {
	seed := make([]byte, seedSize)
	_, _ = rand.Read(seed)
	seedOID := blobOID(uint64(seedSize), func(w func([]byte)) { w(seed) })
	total := uint64(seedSize) * uint64(copies)
	bombOID := blobOID(total, func(w func([]byte)) {
		for range copies {
			w(seed)
		}
	})
	// Delta: source size, target size, then copies × "copy [0, seedSize)".
	delta := append(gitVarint(uint64(seedSize)), gitVarint(total)...)
	op := []byte{0x80 | 0x10 | 0x20 | 0x40, byte(seedSize), byte(seedSize >> 8), byte(seedSize >> 16)}
	for range copies {
		delta = append(delta, op...)
	}
	var p strings.Builder
	fmt.Fprintf(&p, "diff --git a/%s b/%s\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..%s\nGIT binary patch\nliteral %d\n%s\nliteral 0\nHcmV?d00001\n\n",
		path, path, seedOID, seedSize, gitBinaryHunk(seed))
	fmt.Fprintf(&p, "diff --git a/%s b/%s\nindex %s..%s 100644\nGIT binary patch\ndelta %d\n%s\n\n",
		path, path, seedOID, bombOID, len(delta), gitBinaryHunk(delta))
	return []byte(p.String()), total
}
