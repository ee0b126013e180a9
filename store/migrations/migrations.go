package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed sql/*.sql
var embedded embed.FS

// Errors Apply and Check return; callers map them to their own catalogue.
var (
	ErrEdited      = errors.New("migrations: an applied migration differs from the embedded one")
	ErrNewerSchema = errors.New("migrations: the database schema is newer than this binary")
	ErrIncomplete  = errors.New("migrations: the database schema is missing migrations")
	ErrBadSet      = errors.New("migrations: the migration set is malformed")
)

// lockKey is the advisory lock that serialises migration runs across
// processes ("autonomic" in ASCII, truncated to fit an int64).
const lockKey int64 = 0x6175746f6e6f6d

// Migration is one embedded, versioned schema change.
type Migration struct {
	Version  int
	Name     string // e.g. "0001_init.sql"
	SQL      string
	Checksum string // hex SHA-256 of SQL
}

// ParseName decodes a migration file name of the form NNNN_label.sql, with
// a positive decimal version of exactly four digits and a label of
// [a-z0-9_]. Anything else is refused so that a stray file cannot be
// ordered ambiguously.
func ParseName(name string) (int, error) {
	if !strings.HasSuffix(name, ".sql") || len(name) < len("0001_x.sql") || name[4] != '_' {
		return 0, fmt.Errorf("%w: bad file name %q", ErrBadSet, name)
	}
	digits, label := name[:4], strings.TrimSuffix(name[5:], ".sql")
	for _, r := range digits {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("%w: bad version in %q", ErrBadSet, name)
		}
	}
	if label == "" {
		return 0, fmt.Errorf("%w: empty label in %q", ErrBadSet, name)
	}
	for _, r := range label {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return 0, fmt.Errorf("%w: bad label in %q", ErrBadSet, name)
		}
	}
	v, _ := strconv.Atoi(digits)
	if v < 1 {
		return 0, fmt.Errorf("%w: version 0 in %q", ErrBadSet, name)
	}
	return v, nil
}

// Load reads every *.sql file in dir of fsys. Versions must run 1..n with
// no gap or duplicate.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSet, err)
	}
	var out []Migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		v, err := ParseName(e.Name())
		if err != nil {
			return nil, err
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadSet, err)
		}
		sum := sha256.Sum256(b)
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(b), Checksum: hex.EncodeToString(sum[:])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("%w: expected version %d, found %s", ErrBadSet, i+1, m.Name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no migrations", ErrBadSet)
	}
	return out, nil
}

// Embedded returns the migrations compiled into this binary.
func Embedded() ([]Migration, error) { return Load(embedded, "sql") }

const createTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	checksum   text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`

type applied struct {
	version  int
	name     string
	checksum string
}

// Apply brings the database forward to set, one transaction per migration,
// and returns how many it applied. It refuses, changing nothing, when the
// database records an edited or unknown migration.
func Apply(ctx context.Context, conn *pgx.Conn, set []Migration) (int, error) {
	n := 0
	for {
		done, err := applyNext(ctx, conn, set)
		if err != nil {
			return n, err
		}
		if done {
			return n, nil
		}
		n++
	}
}

func applyNext(ctx context.Context, conn *pgx.Conn, set []Migration) (done bool, err error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// Transaction-scoped: released on commit or rollback, even if this
	// process dies mid-migration.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, createTable); err != nil {
		return false, err
	}
	have, err := readApplied(ctx, tx)
	if err != nil {
		return false, err
	}
	if err := compare(have, set, false); err != nil {
		return false, err
	}
	if len(have) == len(set) {
		return true, tx.Commit(ctx)
	}
	m := set[len(have)]
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		return false, fmt.Errorf("migrations: applying %s: %w", m.Name, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)`,
		m.Version, m.Name, m.Checksum); err != nil {
		return false, err
	}
	return false, tx.Commit(ctx)
}

// Check verifies, read-only, that the database is at exactly set. The
// kernel role uses it: it may read the schema table but not change it.
func Check(ctx context.Context, q pgx.Tx, set []Migration) error {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("%w: no schema (run with an admin URL to migrate)", ErrIncomplete)
	}
	have, err := readApplied(ctx, q)
	if err != nil {
		return err
	}
	return compare(have, set, true)
}

func readApplied(ctx context.Context, q pgx.Tx) ([]applied, error) {
	rows, err := q.Query(ctx, `SELECT version, name, checksum FROM schema_migrations ORDER BY version`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (applied, error) {
		var a applied
		err := r.Scan(&a.version, &a.name, &a.checksum)
		return a, err
	})
}

// compare checks the recorded migrations against set. With exact, the
// database must have all of set; otherwise a prefix is fine.
func compare(have []applied, set []Migration, exact bool) error {
	for i, a := range have {
		if a.version > len(set) {
			return fmt.Errorf("%w: database has migration %d (%s), this binary knows up to %d",
				ErrNewerSchema, a.version, a.name, len(set))
		}
		if a.version != i+1 {
			return fmt.Errorf("%w: recorded migrations are not contiguous at %d", ErrIncomplete, a.version)
		}
		if m := set[i]; a.checksum != m.Checksum {
			return fmt.Errorf("%w: %s recorded with checksum %.12s…, embedded %.12s…",
				ErrEdited, m.Name, a.checksum, m.Checksum)
		}
	}
	if exact && len(have) < len(set) {
		return fmt.Errorf("%w: database at version %d, binary expects %d", ErrIncomplete, len(have), len(set))
	}
	return nil
}
