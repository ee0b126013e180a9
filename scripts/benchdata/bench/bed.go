package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
)

// installedLauncher is the path the repository's sudoers rule names.
const installedLauncher = "/usr/local/libexec/autonomic-launcher"

// testbedRun is a launcher built from this checkout (internal/testbed)
// instead of the installed one, and, for the sudo cases, a temporary
// sudoers drop-in naming it, removed when the run ends.
type testbedRun struct {
	bed    *testbed.Bed
	dropin string
	// sudoDir holds the launcher copies the drop-in names. It is under
	// /run, where only root creates entries: were the drop-in ever left
	// behind, no one else could put a program at a path it names (under
	// /tmp, the kernel's account could).
	sudoDir      string
	sudoLauncher string
}

func startTestbed(slots uint32) (*testbedRun, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bed, err := testbed.New(ctx, testbed.Options{})
	if err != nil {
		return nil, err
	}
	if slots > 0 {
		if err := bed.WideUIDPool(slots); err != nil {
			bed.Close()
			return nil, err
		}
	}
	return &testbedRun{bed: bed}, nil
}

// hopVariant is one set of command-specific sudoers Defaults for the rule.
type hopVariant struct {
	name, defaults string
	path           string // a copy of the bed's launcher only this variant's rule names
}

// hopVariants are the Defaults measured for the sudo hop (issue 15 §2).
// "rule" is whatever sudoers.d/autonomic says today.
var hopVariants = []hopVariant{
	{name: "plain", defaults: "env_reset, !use_pty"},
	{name: "no_syslog", defaults: "env_reset, !use_pty, !syslog"},
	{name: "no_pam_session", defaults: "env_reset, !use_pty, !pam_session, !pam_setcred"},
	{name: "no_pam_session_no_syslog", defaults: "env_reset, !use_pty, !pam_session, !pam_setcred, !syslog"},
}

// sudoers writes the drop-in: the repository's rule with the bed's
// launcher in place of the installed path, plus one rule per hop variant,
// each for its own copy of the launcher. visudo checks it before it is
// moved into place; a name with a dot would be ignored by sudo, so none.
func (t *testbedRun) sudoers(repoRule string, variants []hopVariant) error {
	raw, err := os.ReadFile(repoRule)
	if err != nil {
		return err
	}
	t.sudoDir = fmt.Sprintf("/run/autonomic-bench-%d", os.Getpid())
	if err := os.Mkdir(t.sudoDir, 0o755); err != nil {
		return err
	}
	launcher := filepath.Join(t.sudoDir, "autonomic-launcher")
	if err := copyExec(t.bed.Launcher, launcher); err != nil {
		return err
	}
	rule := strings.ReplaceAll(string(raw), installedLauncher, launcher)
	if rule == string(raw) {
		return fmt.Errorf("%s does not name %s", repoRule, installedLauncher)
	}
	var b strings.Builder
	b.WriteString("# Temporary: scripts/bench -testbed, removed when it ends.\n" + rule)
	for i := range variants {
		v := &variants[i]
		v.path = filepath.Join(t.sudoDir, "hop-"+v.name)
		if err := copyExec(t.bed.Launcher, v.path); err != nil {
			return err
		}
		fmt.Fprintf(&b, "Defaults!%s %s\nautonomic ALL=(root) NOPASSWD: %s \"\"\n", v.path, v.defaults, v.path)
	}
	name := fmt.Sprintf("/etc/sudoers.d/autonomic-bench-%d", os.Getpid())
	tmp := filepath.Join(t.bed.Dir, "sudoers")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o440); err != nil {
		return err
	}
	if out, err := exec.Command("visudo", "-cqf", tmp).CombinedOutput(); err != nil {
		return fmt.Errorf("visudo: %v: %s", err, out)
	}
	// Copy (not rename: /tmp may be another filesystem), then the name.
	if err := copyFile(tmp, name+"-new", 0o440); err != nil {
		return err
	}
	t.dropin = name
	if err := os.Rename(name+"-new", name); err != nil {
		return err
	}
	t.sudoLauncher = launcher
	return nil
}

func copyExec(src, dst string) error { return copyFile(src, dst, 0o755) }

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func (t *testbedRun) close() {
	if t.dropin != "" {
		_ = os.Remove(t.dropin)
	}
	if t.sudoDir != "" {
		_ = os.RemoveAll(t.sudoDir)
	}
	_ = t.bed.Close()
}

// ---- the sudo hop ----

type hopResult struct {
	Name     string  `json:"name"`
	Defaults string  `json:"defaults"`
	Runs     int     `json:"runs"`
	MedianMs float64 `json:"median_ms"`
	P90Ms    float64 `json:"p90_ms"`
	// HopMs is the median minus the direct launcher's median: sudo's cost.
	HopMs float64 `json:"hop_ms"`
	// CPUMs is the median CPU time (user + system, with waited-for
	// children); HopCPUMs the same minus the direct launcher's.
	CPUMs    float64 `json:"cpu_median_ms"`
	HopCPUMs float64 `json:"hop_cpu_ms"`
	// Resident says whether sudo stays alive beside the launcher (it forks
	// and waits) or execs the launcher in place.
	SudoResident bool   `json:"sudo_resident"`
	Error        string `json:"error,omitempty"`
}

// runHop times the sudo hop alone: the launcher with empty standard input
// answers with an error frame and exits, directly and through each variant,
// interleaved round by round.
func (b *bench) runHop(variants []hopVariant, runs int) []hopResult {
	// The CPU time (user + system of the process and the children it
	// waited for: sudo's and the launcher's) is what a loaded host does not
	// inflate the way it inflates the wall time.
	one := func(cmd *exec.Cmd) (sample, error) {
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
		cmd.Stdin = b.devnull
		t0 := time.Now()
		out, err := cmd.Output()
		d := time.Since(t0)
		if !strings.Contains(string(out), `"type":"error"`) {
			return sample{}, fmt.Errorf("no error frame (%v)", err)
		}
		return sample{wall: d, started: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}, nil
	}
	sudoCmd := func(path string) *exec.Cmd {
		cmd := exec.Command("sudo", "-n", path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.sudoCred}
		return cmd
	}
	res := make([]hopResult, len(variants)+1)
	samples := make([][]sample, len(variants)+1)
	res[0] = hopResult{Name: "direct", Defaults: "(no sudo)"}
	for i, v := range variants {
		res[i+1] = hopResult{Name: v.name, Defaults: v.defaults, SudoResident: b.sudoResident(sudoCmd(v.path), v.path)}
	}
	for r := 0; r < runs+3; r++ {
		for k := range res {
			i := (r + k) % len(res)
			if res[i].Error != "" {
				continue
			}
			cmd := exec.Command(b.opts.launcher)
			if i > 0 {
				cmd = sudoCmd(variants[i-1].path)
			}
			s, err := one(cmd)
			if err != nil {
				res[i].Error = err.Error()
				continue
			}
			if r >= 3 { // the first rounds warm up
				samples[i] = append(samples[i], s)
			}
		}
	}
	for i := range res {
		if len(samples[i]) == 0 {
			continue
		}
		med, p90, _, _, _ := stats(samples[i], func(s sample) time.Duration { return s.wall })
		res[i].Runs, res[i].MedianMs, res[i].P90Ms = len(samples[i]), ms(med), ms(p90)
		res[i].HopMs = math.Round((res[i].MedianMs-res[0].MedianMs)*100) / 100
		cpu, _, _, _, _ := stats(samples[i], func(s sample) time.Duration { return s.started })
		res[i].CPUMs = ms(cpu)
		res[i].HopCPUMs = math.Round((res[i].CPUMs-res[0].CPUMs)*100) / 100
	}
	return res
}

// sudoResident starts cmd with standard input held open (the launcher
// waits for its request) and looks at what runs: sudo itself, with the
// launcher as its child, or the launcher in sudo's place.
func (b *bench) sudoResident(cmd *exec.Cmd, launcher string) bool {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return false
	}
	cmd.Stdout, cmd.Stderr = b.devnull, b.devnull
	if err := cmd.Start(); err != nil {
		return false
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	want, _ := filepath.EvalSymlinks(launcher)
	for i := 0; i < 500; i++ {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid))
		if exe == want {
			return false
		}
		for _, c := range childrenOf(cmd.Process.Pid) {
			if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", c)); exe == want {
				return true
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}
