// Command genfloor compiles seccomp/profiles/floor.json into
// launcher/internal/floor/floor_gen.go; run it through go generate in
// launcher/internal/floor. It is the floor's only author.
//
// Invariant: launcher/internal/floor/floor_gen.go is exactly what genfloor
// renders from seccomp/profiles/floor.json with the installed libseccomp;
// seccomp's TestFloorGeneratedIsFresh fails otherwise. The file is written
// atomically (temporary file, then rename).
package main
