package migrations

import (
	"errors"
	"testing"
	"testing/fstest"
)

func TestParseName(t *testing.T) {
	for name, want := range map[string]int{"0001_init.sql": 1, "0042_add_index_2.sql": 42, "9999_x.sql": 9999} {
		if v, err := ParseName(name); err != nil || v != want {
			t.Errorf("%s: %d %v", name, v, err)
		}
	}
	for _, name := range []string{"", "0000_zero.sql", "1_init.sql", "00001_init.sql", "0001-init.sql",
		"0001_.sql", "0001_Init.sql", "0001_init.SQL", "0001_in it.sql", "abcd_init.sql", "0001_init.sql.bak", "+001_x.sql"} {
		if _, err := ParseName(name); !errors.Is(err, ErrBadSet) {
			t.Errorf("%q accepted", name)
		}
	}
}

func TestLoad(t *testing.T) {
	set, err := Embedded()
	if err != nil || len(set) == 0 || set[0].Version != 1 || len(set[0].Checksum) != 64 {
		t.Fatalf("embedded: %v", err)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"gap":     {"sql/0001_a.sql": {}, "sql/0003_c.sql": {}},
		"dup":     {"sql/0001_a.sql": {}, "sql/0001_b.sql": {}},
		"no 1":    {"sql/0002_b.sql": {}},
		"empty":   {"sql/README": {}},
		"badname": {"sql/0001_a.sql": {}, "sql/2_b.sql": {}},
	} {
		if _, err := Load(fsys, "sql"); !errors.Is(err, ErrBadSet) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The checksum covers every byte.
	a, _ := Load(fstest.MapFS{"sql/0001_a.sql": {Data: []byte("SELECT 1;")}}, "sql")
	b, _ := Load(fstest.MapFS{"sql/0001_a.sql": {Data: []byte("SELECT 1; ")}}, "sql")
	if a[0].Checksum == b[0].Checksum {
		t.Fatal("checksum ignores trailing whitespace")
	}
}

func TestCompare(t *testing.T) {
	set := []Migration{{Version: 1, Name: "0001_a.sql", Checksum: "aa"}, {Version: 2, Name: "0002_b.sql", Checksum: "bb"}}
	cases := []struct {
		have  []applied
		exact bool
		want  error
	}{
		{nil, false, nil},
		{nil, true, ErrIncomplete},
		{[]applied{{1, "0001_a.sql", "aa"}}, false, nil},
		{[]applied{{1, "0001_a.sql", "aa"}, {2, "0002_b.sql", "bb"}}, true, nil},
		{[]applied{{1, "0001_a.sql", "ab"}}, false, ErrEdited},
		{[]applied{{1, "0001_a.sql", "aa"}, {2, "0002_b.sql", "bb"}, {3, "0003_c.sql", "cc"}}, false, ErrNewerSchema},
		{[]applied{{2, "0002_b.sql", "bb"}}, false, ErrIncomplete},
	}
	for i, c := range cases {
		if err := compare(c.have, set, c.exact); !errors.Is(err, c.want) && !(err == nil && c.want == nil) {
			t.Errorf("case %d: %v, want %v", i, err, c.want)
		}
	}
}

// FuzzParseName: never panics; an accepted name has the exact shape the
// loader orders by.
func FuzzParseName(f *testing.F) {
	for _, s := range []string{"0001_init.sql", "0000_x.sql", "9999_a_b.sql", "0001_.sql", "\x00001_x.sql"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		v, err := ParseName(name)
		if err != nil {
			return
		}
		if v < 1 || v > 9999 || len(name) < 10 || name[4] != '_' || name[len(name)-4:] != ".sql" {
			t.Fatalf("accepted %q as %d", name, v)
		}
	})
}
