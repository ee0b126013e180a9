// Package settings reads and validates the launcher's configuration and
// derives what a request gets from it (limits, the worker's environment).
//
// Privilege: none; the configuration is a root-owned file any account may
// read, and validation is pure.
package settings
