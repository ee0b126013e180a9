package hostprobe

import (
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/autonomic-kernel/autonomic/launcher/internal/confine"
	"github.com/autonomic-kernel/autonomic/protocol"
	"golang.org/x/sys/unix"
)

// Features fills in what the host's kernel offers the launcher: its
// release, namespaces, seccomp actions and the feature list (each with the
// release that brought it, tried where trying is cheap), adding a problem
// for every required feature missing. The caller has set what only the
// monitor can learn (the cgroup parent's facts) first.
func Features(rep *protocol.PreflightReport) {
	problem := func(p string) { rep.Problems = append(rep.Problems, p) }
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	rep.Kernel = unix.ByteSliceToString(uts.Release[:])

	for _, ns := range []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"} {
		if _, err := os.Stat("/proc/self/ns/" + ns); err == nil {
			rep.Namespaces = append(rep.Namespaces, ns)
		}
	}
	major, minor := kernelVersion(rep.Kernel)
	at := func(ma, mi int) bool { return major > ma || major == ma && minor >= mi }
	fs, _ := os.ReadFile("/proc/filesystems")
	// Overlay in a user namespace arrived in 5.11; overlay over idmapped
	// layers in 5.19.
	rep.OverlayInUserns = strings.Contains(string(fs), "\toverlay\n") && at(5, 11)
	rep.IdmappedMounts = at(5, 19)
	acts := confine.HostSeccompActions()
	for a := range acts {
		rep.SeccompActions = append(rep.SeccompActions, a)
	}
	slices.Sort(rep.SeccompActions)
	rep.SeccompUserNotif = acts["user_notif"]
	// What is cheap to try is tried; the rest is known by the release that
	// brought it. The product's floor is Linux 5.19 (README).
	feature := func(name string, required, ok bool, detail string) {
		rep.Features = append(rep.Features, protocol.Feature{Name: name, OK: ok, Required: required, Detail: detail})
		if required && !ok {
			problem("missing host feature " + name + " (" + detail + ")")
		}
	}
	userns, _ := os.ReadFile("/proc/sys/user/max_user_namespaces")
	feature("namespaces", true, len(rep.Namespaces) == 7, "user, mnt, pid, net, ipc, uts and cgroup")
	feature("user_namespaces_enabled", true, strings.TrimSpace(string(userns)) != "0", "user.max_user_namespaces above 0")
	feature("cgroup_v2", true, rep.CgroupV2, "cgroup_parent on cgroup v2")
	feature("cgroup_freeze", true, rep.CgroupFreeze, "Linux 5.2")
	feature("cgroup_kill", true, rep.CgroupKill, "Linux 5.14")
	feature("clone_into_cgroup", true, at(5, 7), "Linux 5.7")
	feature("openat2", true, tryOpenat2(), "Linux 5.6")
	feature("close_range_cloexec", true, at(5, 11), "Linux 5.11")
	feature("mount_api", true, at(5, 2), "open_tree, move_mount: Linux 5.2")
	feature("idmapped_mounts", true, at(5, 12), "mount_setattr: Linux 5.12")
	feature("overlay_in_userns", true, rep.OverlayInUserns, "Linux 5.11")
	feature("overlay_over_idmapped_layers", true, rep.IdmappedMounts, "Linux 5.19")
	feature("seccomp_user_notif", true, rep.SeccompUserNotif, "Linux 5.0")
	feature("seccomp_wait_killable_recv", true, at(5, 19), "Linux 5.19")
	feature("pidfd_open", true, tryPidfd(), "Linux 5.3; the broker's peer binding")
	feature("so_peerpidfd", false, trySOPeerPidfd(), "Linux 6.5; without it the broker binds peers through pidfd_open")
}

func kernelVersion(release string) (int, int) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0
	}
	ma, _ := strconv.Atoi(parts[0])
	mi, _ := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return ma, mi
}

func tryOpenat2() bool {
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	closeFd(fd)
	return err == nil
}

func tryPidfd() bool {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	closeFd(fd)
	return err == nil
}

// trySOPeerPidfd asks a connected socket pair for its peer's pidfd; older
// kernels answer ENOPROTOOPT.
func trySOPeerPidfd() bool {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	pidfd, err := unix.GetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	if err == nil {
		unix.Close(pidfd)
	}
	return err == nil
}

func closeFd(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}
