// Package config reads the kernel's one JSON configuration file.
//
// Invariant: a configuration is either wholly valid or refused. Load parses
// strictly — one object, no duplicate key at any depth, no key the Config
// type does not declare, bounded size, depth and node count — then checks
// every value and reports every problem at once, each naming its key path
// ("store.url") and what is wrong. Nothing in the kernel starts from a
// configuration that did not pass Load.
//
// The file holds no credentials of its own: the sensor's API key is named by
// environment variable, never written here. The store URL may carry a
// password, so Load refuses a file that other users can read or write.
// Errors never echo a value (a URL with a password must not reach a log);
// they name the key.
//
// Defaults are applied only to keys that are absent; a present key with an
// out-of-range value is an error, never silently replaced.
package config
