package episode

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestIllegalEpisodeTransitions walks every pair of states: the table's
// moves are allowed, every other one is a typed error, and a final state
// has no way out.
func TestIllegalEpisodeTransitions(t *testing.T) {
	legal := map[[2]State]bool{}
	for _, from := range States() {
		for _, to := range next(from) {
			legal[[2]State{from, to}] = true
		}
	}
	illegal := 0
	for _, from := range States() {
		for _, to := range States() {
			err := transition(from, to)
			if legal[[2]State{from, to}] {
				if err != nil {
					t.Errorf("%s → %s: %v", from, to, err)
				}
				continue
			}
			illegal++
			var ie *ErrIllegalTransition
			if !errors.As(err, &ie) || ie.From != from || ie.To != to {
				t.Errorf("%s → %s: err = %v, want ErrIllegalTransition", from, to, err)
			}
		}
	}
	if illegal == 0 || len(legal)+illegal != len(States())*len(States()) {
		t.Fatalf("walked %d illegal and %d legal transitions", illegal, len(legal))
	}
	for _, s := range []State{Completed, Contained, Aborted} {
		if !s.Final() || s.storeState() == "active" {
			t.Errorf("%s is not final in both tables", s)
		}
	}
	for _, s := range []State{Pending, Starting, Running, Repairing, Suspended} {
		if s.Final() {
			t.Errorf("%s is final", s)
		}
		if !Allowed(s, Aborted) {
			t.Errorf("%s cannot be aborted", s)
		}
	}
	// Nothing returns to pending or starting: an episode starts once.
	for _, from := range States() {
		if Allowed(from, Pending) || (from != Pending && Allowed(from, Starting)) {
			t.Errorf("%s may restart the episode", from)
		}
	}
}

// TestEveryStateChangeThroughTheTable walks the table through the one
// writer, moveLocked: from every state to every state, the move happens
// exactly when the table allows it, and a refused move leaves the state
// and its reason as they were.
func TestEveryStateChangeThroughTheTable(t *testing.T) {
	for _, from := range States() {
		for _, to := range States() {
			e := &Episode{state: from, why: "before"}
			err := e.moveLocked(to, "after")
			switch {
			case Allowed(from, to) && (err != nil || e.state != to || e.why != "after"):
				t.Errorf("%s → %s: %v, now %s (%q)", from, to, err, e.state, e.why)
			case !Allowed(from, to) && (err == nil || e.state != from || e.why != "before"):
				t.Errorf("%s → %s refused? %v, now %s (%q)", from, to, err, e.state, e.why)
			}
		}
	}
	// Kernel start takes over a recorded episode as suspended (Recover):
	// a move the table names, not a write around it.
	if !Allowed(Pending, Suspended) {
		t.Fatal("recovery's pending → suspended is not in the table")
	}
}

// TestStateWrittenOnlyByMoveLocked reads the package's source: the only
// assignment to an episode's state field is in moveLocked, and the only
// state an Episode is built with is Pending. A direct write elsewhere (as
// four places once did, one of them a move the table forbade) fails here.
func TestStateWrittenOnlyByMoveLocked(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.AssignStmt:
					for _, lhs := range n.Lhs {
						if sel, ok := lhs.(*ast.SelectorExpr); ok && sel.Sel.Name == "state" {
							checked++
							if fn.Name.Name != "moveLocked" {
								t.Errorf("%s: %s writes the state outside the table", fset.Position(n.Pos()), fn.Name.Name)
							}
						}
					}
				case *ast.CompositeLit:
					if id, ok := n.Type.(*ast.Ident); !ok || id.Name != "Episode" {
						return true
					}
					for _, el := range n.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok {
							if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "state" {
								if v, ok := kv.Value.(*ast.Ident); !ok || v.Name != "Pending" {
									t.Errorf("%s: an episode built in a state other than pending", fset.Position(kv.Pos()))
								}
							}
						}
					}
				}
				return true
			})
		}
	}
	if checked != 1 {
		t.Fatalf("found %d assignments to state, want the one in moveLocked", checked)
	}
}
