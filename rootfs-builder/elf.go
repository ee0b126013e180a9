package rootfs

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// DefaultLibraryDirs is the search path used after RPATH/RUNPATH, in the
// order Debian's ld.so.conf.d and the dynamic linker's built-in multiarch
// defaults give (amd64).
func DefaultLibraryDirs() []string {
	return []string{
		"/usr/local/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
		"/usr/local/lib", "/lib64", "/usr/lib64", "/lib", "/usr/lib",
	}
}

// elfInfo is what the closure needs from one object.
type elfInfo struct {
	class   elf.Class
	machine elf.Machine
	interp  string
	needed  []string
	rpath   []string
	runpath []string
}

// readELF returns nil, nil for a file that is not ELF (a script, data).
func readELF(file string) (*elfInfo, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || string(magic[:]) != elf.ELFMAG {
		return nil, nil
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: malformed ELF: %v", ErrSpec, file, err)
	}
	defer ef.Close()
	info := &elfInfo{class: ef.Class, machine: ef.Machine}
	if ef.Type != elf.ET_EXEC && ef.Type != elf.ET_DYN {
		return info, nil // relocatable objects (crt1.o) have no loader needs
	}
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_INTERP {
			b, err := io.ReadAll(io.LimitReader(prog.Open(), 4096))
			if err != nil {
				return nil, fmt.Errorf("%w: %s: PT_INTERP: %v", ErrSpec, file, err)
			}
			info.interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if !hasDynamic(ef) {
		return info, nil
	}
	// DynString fails on objects without a dynamic section; that is a static
	// binary and needs nothing.
	info.needed, _ = ef.DynString(elf.DT_NEEDED)
	rpath, _ := ef.DynString(elf.DT_RPATH)
	runpath, _ := ef.DynString(elf.DT_RUNPATH)
	for _, r := range rpath {
		info.rpath = append(info.rpath, strings.Split(r, ":")...)
	}
	for _, r := range runpath {
		info.runpath = append(info.runpath, strings.Split(r, ":")...)
	}
	return info, nil
}

func hasDynamic(ef *elf.File) bool {
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_DYNAMIC {
			return true
		}
	}
	return false
}

// closure adds the interpreter and every DT_NEEDED library of the ELF object
// at real (a symlink-free host path), recursively. strict makes an
// unresolved library an error; otherwise it is a note. inherited is the
// RPATH chain of the objects that loaded this one, which the dynamic linker
// also searches when the object has no RUNPATH.
func (p *planner) closure(real string, strict bool, inherited []string) error {
	if p.elfDone[real] {
		return nil
	}
	if err := p.ctx.Err(); err != nil {
		return err
	}
	p.elfDone[real] = true
	info, err := readELF(real)
	if err != nil && !strict {
		p.notef("%v", err)
		return nil
	}
	if err != nil || info == nil {
		return err
	}
	if info.interp != "" {
		ireal, fi, err := p.follow(info.interp)
		if err != nil {
			if !strict && errors.Is(err, ErrMissing) {
				p.notef("%s: interpreter %s not found", real, info.interp)
				return nil
			}
			return fmt.Errorf("interpreter of %s: %w", real, err)
		}
		if !p.envProvides(ireal) {
			if err := p.addFile(ireal, fi); err != nil {
				return err
			}
		}
	}
	origin := path.Dir(real)
	var search []string
	if len(info.runpath) > 0 {
		search = expandOrigin(info.runpath, origin)
	} else {
		search = append(expandOrigin(info.rpath, origin), inherited...)
	}
	search = append(search, p.libDirs...)
	childInherited := append(append([]string{}, inherited...), expandOrigin(info.rpath, origin)...)
	for _, name := range info.needed {
		lib, err := p.findLibrary(name, search, info)
		if err != nil {
			return err
		}
		if lib == "" {
			if strict {
				return fmt.Errorf("%w: %s needs %s, not found in %s", ErrUnresolved, real, name, strings.Join(search, ":"))
			}
			p.notef("%s: needed library %s not found", real, name)
			continue
		}
		lreal, fi, err := p.follow(lib)
		if err != nil {
			return err
		}
		if p.envProvides(lreal) {
			// The environment's own copy serves the object, with the
			// libraries the environment's packages bring beside it.
			continue
		}
		if err := p.addFile(lreal, fi); err != nil {
			return err
		}
		if err := p.closure(lreal, strict, childInherited); err != nil {
			return err
		}
	}
	return nil
}

// envProvides reports whether the environment's tree (addTree) already
// has path rp: a file from its own tree, or a symlink. A host binary added
// on top of an environment (the agent CLIs onto Debian or an image) then
// loads the environment's library, never a second, host copy of it.
func (p *planner) envProvides(rp string) bool {
	n, ok := p.nodes[rp]
	return ok && p.env && (n.kind == kindSymlink || (n.kind == kindFile && n.src != "" && n.src != rp))
}

func expandOrigin(dirs []string, origin string) []string {
	out := make([]string, 0, len(dirs))
	for _, d := range dirs {
		d = strings.ReplaceAll(d, "${ORIGIN}", origin)
		d = strings.ReplaceAll(d, "$ORIGIN", origin)
		d = strings.ReplaceAll(d, "${LIB}", "lib/x86_64-linux-gnu")
		d = strings.ReplaceAll(d, "$LIB", "lib/x86_64-linux-gnu")
		// Relative entries are relative to the process's working directory
		// at run time, which the builder cannot know: skip them.
		if d != "" && path.IsAbs(d) {
			out = append(out, path.Clean(d))
		}
	}
	return out
}

// findLibrary returns the first candidate the dynamic linker would accept:
// it exists and has the requester's ELF class and machine (a 32-bit libc in
// /usr/lib must not satisfy a 64-bit binary).
func (p *planner) findLibrary(name string, search []string, req *elfInfo) (string, error) {
	var candidates []string
	if strings.Contains(name, "/") {
		if !path.IsAbs(name) {
			return "", nil
		}
		candidates = []string{name}
	} else {
		for _, d := range search {
			candidates = append(candidates, path.Join(d, name))
		}
	}
	for _, c := range candidates {
		if why := Denied(c); why != "" {
			return "", deniedErr(c, why)
		}
		info, err := readELF(c)
		if err != nil || info == nil {
			continue // absent, unreadable or not ELF: the linker moves on too
		}
		if info.class == req.class && info.machine == req.machine {
			return c, nil
		}
	}
	return "", nil
}
