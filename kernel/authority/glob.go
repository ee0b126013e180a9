package authority

import "github.com/autonomic-kernel/autonomic/protocol/pathglob"

// Limits on what a capability may contain. They bound the work of one
// Check, so a hostile or careless policy cannot make the hot path slow.
const (
	MaxPathLen      = pathglob.MaxPathLen  // bytes of one requested path
	MaxGlobLen      = pathglob.MaxGlobLen  // bytes of one glob
	MaxPathSegments = pathglob.MaxSegments // segments of one requested path
	MaxGlobs        = 64                   // globs in one allow or forbid list
	MaxClauses      = 8                    // allow clauses after intersection
	MaxGrants       = 64
	maxTargetIDLen  = 63
)

// The one path-glob matcher is protocol/pathglob (the broker's git target
// lists use it too); these names keep the algebra readable.
type (
	glob      = pathglob.Glob
	splitPath = pathglob.Path
)

// Allow globs match exactly; forbid globs match folded (case-insensitive,
// NFKC), so a case or compatibility variant of a forbidden name is still
// forbidden on the hosts where the repository will be checked out.
func compileAllow(src string) (glob, error)  { return pathglob.Compile(src) }
func compileForbid(src string) (glob, error) { return pathglob.CompileFolded(src) }
