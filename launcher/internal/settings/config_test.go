package settings

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAccountInRange(t *testing.T) {
	db := filepath.Join(t.TempDir(), "passwd")
	content := "root:x:0:0::/root:/bin/sh\nodd:x:1879048200:1879048200::/:/bin/sh\nbroken line\n"
	if err := os.WriteFile(db, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, ok := accountInRange(db, 1879048192, 1879048192+65536); !ok || id != 1879048200 {
		t.Fatalf("account inside the pool not found: %d %v", id, ok)
	}
	if _, ok := accountInRange(db, 1, 1000); ok {
		t.Fatal("found an account where there is none")
	}
}

func TestSubidsInRange(t *testing.T) {
	db := filepath.Join(t.TempDir(), "subuid")
	if err := os.WriteFile(db, []byte("alice:100000:65536\nbob:1879113728:65536\nbroken\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, ok := subidsInRange(db, 1879048192, 1879048192+4*65536); !ok || id != 1879113728 {
		t.Fatalf("delegated range inside the pool not found: %d %v", id, ok)
	}
	if id, ok := subidsInRange(db, 90000, 100001); !ok || id != 100000 {
		t.Fatalf("overlap at the pool's end not found: %d %v", id, ok)
	}
	if id, ok := subidsInRange(db, 120000, 130000); !ok || id != 120000 {
		t.Fatalf("a delegated range around the whole pool not found: %d %v", id, ok)
	}
	if _, ok := subidsInRange(db, 165536, 1879048192); ok {
		t.Fatal("found a delegated range where there is none")
	}
}
