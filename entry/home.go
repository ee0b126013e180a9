package entry

import (
	"errors"
	"strings"

	"golang.org/x/sys/unix"
)

// WriteHome writes f beneath the directory home, one component at a time,
// never following a symlink (O_NOFOLLOW on every open), making missing
// directories 0700. The file is created or replaced in place, mode 0600.
func WriteHome(home string, f HomeFile) error {
	dir, err := unix.Open(home, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	parts := strings.Split(f.Rel, "/")
	for _, name := range parts[:len(parts)-1] {
		if err := unix.Mkdirat(dir, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(dir)
			return err
		}
		next, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(dir)
		if err != nil {
			return err
		}
		dir = next
	}
	defer unix.Close(dir)
	fd, err := unix.Openat(dir, parts[len(parts)-1], unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.Join(err, errors.New("not a regular file"))
	}
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return err
	}
	for b := f.Data; len(b) > 0; {
		n, err := unix.Write(fd, b)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
