package entry

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Main runs autonomic-entry with the arguments after the program name and
// returns its exit status: ARGV's, or 2 for a bad command line, 1 when the
// home files, bridges or ARGV could not be set up.
func Main(args []string, stderr io.Writer) int {
	spec, err := Parse(args)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	code, err := Run(spec)
	if err != nil {
		fmt.Fprintln(stderr, "autonomic-entry:", err)
		return 1
	}
	return code
}

// Run writes the home files, starts the bridges, runs ARGV and returns its
// exit status once it has exited.
func Run(spec *Spec) (int, error) {
	home := os.Getenv("HOME")
	if !filepath.IsAbs(home) {
		return 0, errors.New("HOME is not an absolute path")
	}
	for _, f := range spec.HomeFiles {
		if err := WriteHome(home, f); err != nil {
			return 0, fmt.Errorf("home file %q: %w", f.Rel, err)
		}
	}
	// Every listener is open before ARGV starts: its first request finds it.
	for _, b := range spec.Bridges {
		ln, err := b.Listen()
		if err != nil {
			return 0, err
		}
		defer ln.Close()
		go b.Serve(ln)
	}
	env := os.Environ()
	for _, kv := range spec.Env {
		k, _, _ := strings.Cut(kv, "=")
		env = append(slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") }), kv)
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, os.Stdout, os.Stderr // Stdin nil: /dev/null
	if filepath.Base(spec.Argv[0]) == spec.Argv[0] {
		// Looked up in the PATH ARGV will have, not ours.
		cmd.Path, cmd.Err = lookPath(spec.Argv[0], env)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case err := <-done:
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				return 0, err
			}
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if ws.Signaled() {
				return 128 + int(ws.Signal()), nil
			}
			return ws.ExitStatus(), nil
		}
	}
}

func lookPath(name string, env []string) (string, error) {
	for _, e := range slices.Backward(env) {
		if dirs, ok := strings.CutPrefix(e, "PATH="); ok {
			for _, d := range filepath.SplitList(dirs) {
				p := filepath.Join(d, name)
				if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
					return p, nil
				}
			}
			break
		}
	}
	return "", fmt.Errorf("%s: not found in PATH", name)
}
