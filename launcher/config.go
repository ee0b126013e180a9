package main

import "github.com/autonomic-kernel/autonomic/launcher/internal/settings"

// configPath is fixed at build time (-ldflags -X main.configPath=...), never
// taken from the environment or argv: whoever can run the launcher must not
// be able to point it at a configuration of their own.
var configPath = "/etc/autonomic/launcher.json"

// Load loads the configuration at configPath (settings.Load).
func loadConfig() (*settings.Config, error) { return settings.Load(configPath) }
