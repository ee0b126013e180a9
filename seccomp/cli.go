package seccomp

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

const usage = `usage:
  autonomic seccomp compile [-base64] [-o FILE] [flags] PROFILE
      writes the raw BPF program (little-endian struct sock_filter array) to
      FILE or standard output, or base64 with -base64; prints the SHA-256 and
      instruction count (to standard error when the program goes to standard
      output)
  autonomic seccomp explain [flags] PROFILE SYSCALL [ARG...]
      prints what the compiled program answers for SYSCALL (a name or number)
      with ARGs (decimal or 0x-hex; missing ones are 0) and which rule decides
  autonomic seccomp check [flags] PROFILE...
      validates profiles completely (parse, compile, every rule live)
flags:
  -no-notify     lower SCMP_ACT_NOTIFY to SCMP_ACT_KILL_PROCESS (host lacks
                 user notification)
  -kernel X.Y    kernel version for minKernel conditions (default: this host's)
PROFILE is a path, "-" for standard input, or builtin:NAME for a shipped
profile (worker, worker-loopback, agent, floor).
`

// Command implements "autonomic seccomp compile|explain|check". It returns
// the process exit code: 0 success, 1 a profile or compile error, 2 usage.
func Command(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("seccomp "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	noNotify := fs.Bool("no-notify", false, "lower SCMP_ACT_NOTIFY to SCMP_ACT_KILL_PROCESS")
	kernel := fs.String("kernel", "", "kernel version X.Y for minKernel conditions")
	var b64 *bool
	var out *string
	switch sub {
	case "compile":
		b64 = fs.Bool("base64", false, "write the program as base64")
		out = fs.String("o", "", "write the program to this file")
	case "explain", "check":
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "seccomp: unknown subcommand %q\n%s", sub, usage)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	opts := Options{NotifyUnsupported: *noNotify}
	if *kernel != "" {
		k, err := ParseKernelVersion(*kernel, false)
		if err != nil {
			fmt.Fprintln(stderr, "seccomp:", err)
			return 2
		}
		opts.Kernel = k
	} else {
		opts.Kernel = hostKernel()
	}
	rest := fs.Args()
	switch sub {
	case "compile":
		if len(rest) != 1 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		return cmdCompile(rest[0], opts, *b64, *out, stdout, stderr)
	case "explain":
		if len(rest) < 2 || len(rest) > 8 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		return cmdExplain(rest[0], rest[1], rest[2:], opts, stdout, stderr)
	default:
		if len(rest) == 0 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		code := 0
		for _, path := range rest {
			p, err := loadProfile(path)
			if err == nil {
				var prog Program
				if prog, err = Compile(p, opts); err == nil {
					fmt.Fprintf(stdout, "ok %s: %d instructions, sha256 %s\n", path, prog.Count, prog.SHA256)
					continue
				}
			}
			fmt.Fprintf(stderr, "%s: %v\n", path, err)
			code = 1
		}
		return code
	}
}

func cmdCompile(path string, opts Options, b64 bool, out string, stdout, stderr io.Writer) int {
	p, err := loadProfile(path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return 1
	}
	prog, err := Compile(p, opts)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return 1
	}
	data := prog.Bytes()
	if b64 {
		data = []byte(base64.StdEncoding.EncodeToString(data) + "\n")
	}
	summary := stderr
	if out != "" {
		if err := writeFileAtomic(out, data); err != nil {
			fmt.Fprintln(stderr, "seccomp:", err)
			return 1
		}
		summary = stdout
	} else if _, err := stdout.Write(data); err != nil {
		fmt.Fprintln(stderr, "seccomp:", err)
		return 1
	}
	fmt.Fprintf(summary, "sha256 %s\ninstructions %d\nlibseccomp %s\n", prog.SHA256, prog.Count, prog.Libseccomp)
	return 0
}

func cmdExplain(path, syscall string, argStrs []string, opts Options, stdout, stderr io.Writer) int {
	p, err := loadProfile(path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return 1
	}
	args := make([]uint64, len(argStrs))
	for i, s := range argStrs {
		if args[i], err = strconv.ParseUint(s, 0, 64); err != nil {
			fmt.Fprintf(stderr, "seccomp: argument %d: %q is not an unsigned integer\n", i, s)
			return 2
		}
	}
	x, err := Explain(p, syscall, args, opts)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return 1
	}
	fmt.Fprint(stdout, x.String())
	return 0
}

func loadProfile(path string) (Profile, error) {
	var data []byte
	var err error
	switch {
	case path == "-":
		data, err = io.ReadAll(io.LimitReader(os.Stdin, MaxProfileSize+1))
	case len(path) > len("builtin:") && path[:len("builtin:")] == "builtin:":
		return Shipped(path[len("builtin:"):])
	default:
		data, err = readFileLimited(path)
	}
	if err != nil {
		return Profile{}, err
	}
	return Parse(data)
}

func readFileLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxProfileSize+1))
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// hostKernel is this host's kernel version, or zero (unknown) when uname
// cannot be parsed.
func hostKernel() KernelVersion {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return KernelVersion{}
	}
	k, err := ParseKernelVersion(unix.ByteSliceToString(u.Release[:]), true)
	if err != nil {
		return KernelVersion{}
	}
	return k
}
