package entry

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"strings"
)

// Spec is a decoded command line.
type Spec struct {
	HomeFiles []HomeFile
	Env       []string // K=V
	Bridges   []Bridge
	Argv      []string
}

// HomeFile is a file to write under $HOME.
type HomeFile struct {
	Rel  string
	Data []byte
}

// Bridge forwards connections to a loopback TCP address to a Unix socket.
type Bridge struct {
	Addr   netip.AddrPort
	Socket string
}

// ErrUsage is the error of every malformed command line.
var ErrUsage = errors.New("usage: autonomic-entry [--home-file REL=BASE64]... [--env K=V]... [--bridge 127.0.0.1:PORT=/SOCKET]... -- ARGV...")

var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Parse decodes the arguments after the program name. Every flag takes
// its value as the next argument; "--" ends the flags and ARGV follows.
func Parse(args []string) (*Spec, error) {
	s := &Spec{}
	bad := func(format string, a ...any) (*Spec, error) {
		return nil, fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, a...))
	}
	for i := 0; i < len(args); i += 2 {
		flag := args[i]
		if flag == "--" {
			if s.Argv = args[i+1:]; len(s.Argv) == 0 || s.Argv[0] == "" {
				return bad("no program after --")
			}
			return s, nil
		}
		if i+1 == len(args) {
			return bad("%q needs a value", flag)
		}
		k, v, ok := strings.Cut(args[i+1], "=")
		if !ok {
			return bad("%s value is not K=V", flag)
		}
		switch flag {
		case "--home-file":
			// Relative, clean, no "." or "..": only ever a name beneath $HOME.
			if !path.IsAbs(k) && path.Clean(k) == k && k != "." && k != ".." && !strings.HasPrefix(k, "../") {
				if b, err := base64.StdEncoding.Strict().DecodeString(v); err == nil && base64.StdEncoding.EncodeToString(b) == v {
					s.HomeFiles = append(s.HomeFiles, HomeFile{Rel: k, Data: b})
					continue
				}
			}
			return bad("--home-file wants a relative name without .. and canonical base64 content")
		case "--env":
			if !envKey.MatchString(k) {
				return bad("--env name %q", k)
			}
			s.Env = append(s.Env, k+"="+v)
		case "--bridge":
			ap, err := netip.ParseAddrPort(k)
			if err != nil || !ap.Addr().IsLoopback() || ap.Port() == 0 || !path.IsAbs(v) {
				return bad("--bridge wants a loopback IP:PORT and an absolute socket path")
			}
			s.Bridges = append(s.Bridges, Bridge{Addr: ap, Socket: v})
		default:
			return bad("unknown flag %q", flag)
		}
	}
	return bad("missing --")
}
