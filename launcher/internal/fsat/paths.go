package fsat

import (
	"errors"
	"io"
	"os"
	"strings"

	"github.com/autonomic-kernel/autonomic/protocol"
	"golang.org/x/sys/unix"
)

// beneath is the only way the launcher resolves a name: relative to a
// directory it already holds, never crossing a symlink, a magic link or "..".
// A compromised kernel that plants a symlink where we expect a directory gets
// path_unsafe instead of us following it into the host.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

func OpenBeneath(dirfd int, name string, flags uint64) (int, error) {
	return openat2(dirfd, name, flags, beneath)
}

// OpenOwned opens name beneath dirfd for reading and returns it with its
// size only if it is a regular file of uid's with one link: a file another
// account made, or a second name for one that lives (and may change)
// elsewhere, is refused before a byte is read. It never leaves dirfd's
// mount, where a FUSE file its owner serves could stall the reader, and
// opens non-blocking, so a FIFO cannot hold it in open.
func OpenOwned(dirfd int, name string, uid uint32) (*os.File, int64, error) {
	fd, err := openat2(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK, beneath|unix.RESOLVE_NO_XDEV)
	if err != nil {
		return nil, 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != uid || st.Nlink != 1 {
		unix.Close(fd)
		return nil, 0, errors.Join(err, errors.New("not a regular file of its owner's alone"))
	}
	return os.NewFile(uintptr(fd), name), st.Size, nil
}

func openat2(dirfd int, name string, flags, resolve uint64) (int, error) {
	for {
		fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: resolve})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// OpenDir opens name as a directory and proves it is one.
func OpenDir(dirfd int, name string) (int, error) {
	fd, err := OpenBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return -1, Classify(err)
	}
	return fd, nil
}

func Classify(err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return err
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV), errors.Is(err, unix.ENOTDIR):
		return protocol.Errorf(protocol.CodePathUnsafe, "%w", err)
	}
	return err
}

// OpenRoot opens a configured absolute path. Configuration is root-owned and
// trusted, but the directories on the way to a root may not be: an owner of
// one could swap a component for a symlink and lead the launcher elsewhere.
// So no component, intermediate or final, may be a symlink.
func OpenRoot(path string) (int, error) {
	fd, err := OpenAbsolute(path)
	if err != nil {
		return -1, protocol.Errorf(protocol.CodeConfigInvalid, "open configured root: %w", err)
	}
	return fd, nil
}

func OpenAbsolute(path string) (int, error) {
	if !strings.HasPrefix(path, "/") {
		return -1, errors.New("relative path")
	}
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := unix.Openat2(unix.AT_FDCWD, path, how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// Names lists a directory through its descriptor.
func Names(fd int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	return f.Readdirnames(-1)
}

// WriteFile creates name with exactly data, on disk before it returns.
// A short write is an error, never a shorter record: a caller's
// RLIMIT_FSIZE once cut a cgroup id to its first digits, and destroy then
// took the domain's own cgroup for someone else's (issue 27, finding 3).
// SomeNames lists at most n names of a directory (all when it has
// fewer), through its descriptor.
func SomeNames(fd, n int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	var names []string
	for len(names) < n {
		more, err := f.Readdirnames(min(n-len(names), 1024))
		names = append(names, more...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return names, nil
}

func WriteFile(dirfd int, name string, data []byte, mode uint32) error {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	err = WriteAll(fd, data)
	if err == nil {
		err = unix.Fsync(fd)
	}
	unix.Close(fd)
	if err == nil {
		err = unix.Fsync(dirfd)
	}
	if err != nil {
		_ = unix.Unlinkat(dirfd, name, 0)
	}
	return err
}

// WriteAll writes every byte of data or fails.
func WriteAll(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return io.ErrShortWrite
		}
		data = data[n:]
	}
	return nil
}

func ReadFile(dirfd int, name string, max int64) ([]byte, error) {
	fd, err := OpenBeneath(dirfd, name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = errors.New("file too large")
	}
	return b, err
}
