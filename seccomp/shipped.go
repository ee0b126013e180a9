package seccomp

import (
	"embed"
	"fmt"
)

// profilesFS holds the shipped profiles. An embed.FS is read-only, so this
// is not mutable package state.
//
//go:embed profiles/*.json
var profilesFS embed.FS

// ShippedNames lists the profiles in seccomp/profiles.
func ShippedNames() []string { return []string{"worker", "worker-loopback", "agent", "floor"} }

// ShippedJSON returns the bytes of a shipped profile by name ("worker",
// "worker-loopback", "agent", "floor").
func ShippedJSON(name string) ([]byte, error) {
	for _, n := range ShippedNames() {
		if n == name {
			return profilesFS.ReadFile("profiles/" + name + ".json")
		}
	}
	return nil, fmt.Errorf("seccomp: no shipped profile %q", name)
}

// Shipped parses a shipped profile by name.
func Shipped(name string) (Profile, error) {
	data, err := ShippedJSON(name)
	if err != nil {
		return Profile{}, err
	}
	return Parse(data)
}
