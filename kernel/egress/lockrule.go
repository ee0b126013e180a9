package egress

import (
	"strings"

	"github.com/autonomic-kernel/autonomic/kernel/lockfile"
	"github.com/autonomic-kernel/autonomic/protocol"
	"golang.org/x/mod/module"
)

// registryRule holds an admitted request to a registry host to its
// protocol and, when lock is set (the policy's lockfile-bound mode), to
// the objects lock names: anything else on that registry is refused with
// the name and version it lacked.
func (p *Proxy) registryRule(kind Registry, q *request) *refusal {
	switch kind {
	case GoProxy, GoProxyCachedOnly, GoSumDB:
		if ref := goRule(kind, q, &p.goSeen, p.codeHosts); ref != nil || p.cfg.Lock == nil || kind == GoSumDB {
			return ref
		}
		return goLocked(p.cfg.Lock, strings.TrimPrefix(q.path, "/cached-only"))
	case NPM:
		if p.cfg.Lock == nil {
			return nil
		}
		if _, ok := p.cfg.Lock.NPMTarball(q.path); ok {
			return nil
		}
		if name, ok := packumentName(q.path); ok && q.query == "" && p.cfg.Lock.NPMPackage(name) {
			return nil // metadata of a locked package: npm reads it to find a pinned tarball
		}
		return refuse(protocol.CodeForbidden, "lockfile-bound: "+npmName(q.path)+" is not in the base commit's lockfiles ("+p.cfg.Lock.Names()+")")
	}
	return nil
}

// goLocked admits a Go mirror request only for a module version go.sum
// names: its .zip (h1 of the zip), .mod and .info (h1 of the go.mod);
// list and latest, which resolve versions, are refused.
func goLocked(lock *lockfile.Set, path string) *refusal {
	if strings.HasPrefix(path, "/sumdb/") {
		return nil // lookups are already limited to versions served
	}
	m := goObjectRE.FindStringSubmatch(path)
	if m == nil {
		return refuse(protocol.CodeForbidden, "lockfile-bound: version resolution (list, @latest) is refused; the base commit's go.sum names the versions")
	}
	mod, err1 := module.UnescapePath(m[1])
	ver, err2 := module.UnescapeVersion(m[2])
	if err1 != nil || err2 != nil {
		return refuse(protocol.CodeInvalidField, "not a module path and version")
	}
	var ok bool
	if strings.HasSuffix(path, ".zip") {
		_, ok = lock.GoZip(mod, ver)
	} else {
		_, ok = lock.GoMod(mod, ver)
	}
	if !ok {
		return refuse(protocol.CodeForbidden, "lockfile-bound: "+printable(mod+"@"+ver)+" is not in the base commit's lockfiles ("+lock.Names()+")")
	}
	return nil
}

// npmName is the package and version an npm request names, for a reason:
// "/@s/n/-/n-1.2.3.tgz" is "@s/n@1.2.3", "/n" (a packument) is "n".
func npmName(path string) string {
	pkg, file, tarball := strings.Cut(strings.TrimPrefix(path, "/"), "/-/")
	pkg = strings.ReplaceAll(pkg, "%2f", "/")
	pkg = strings.ReplaceAll(pkg, "%2F", "/")
	if !tarball {
		return printable(pkg) + " (package metadata)"
	}
	base := pkg[strings.LastIndex(pkg, "/")+1:]
	ver := strings.TrimSuffix(strings.TrimPrefix(file, base+"-"), ".tgz")
	return printable(pkg + "@" + ver)
}

// packumentName is the package an npm metadata path names: "/name",
// "/@scope%2fname" or "/@scope/name".
func packumentName(path string) (string, bool) {
	if !isPackument(path) {
		return "", false
	}
	n := strings.TrimPrefix(path, "/")
	n = strings.Replace(strings.Replace(n, "%2f", "/", 1), "%2F", "/", 1)
	parts := strings.Split(n, "/")
	switch {
	case len(parts) == 1 && !strings.HasPrefix(n, "@"):
	case len(parts) == 2 && strings.HasPrefix(n, "@"):
	default:
		return "", false
	}
	return n, true
}
