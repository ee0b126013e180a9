// Package migrations holds the authority store's schema as embedded SQL and
// applies it forward-only.
//
// Invariant: the schema a store runs against is exactly a prefix-closed set
// of the migrations compiled into this binary, byte for byte. Each migration
// is applied in its own transaction together with the row that records its
// SHA-256 checksum, under an advisory lock so two kernels starting at once
// cannot apply one twice. A database that records a migration whose checksum
// differs from the embedded one (an edited migration) or a version this
// binary does not know (a newer schema) is refused with a clear error and
// left untouched: running authority code against a schema it was not
// written for is how fencing silently stops working.
//
// There are no down migrations; a mistake is corrected by a new migration.
package migrations
