// Package statefile writes the kernel's own small state files under
// state_dir (the targets and policy keys an operator registered while it
// runs): whole or not at all — a temporary file in the same directory,
// written, fsynced, mode 0600, renamed over the old one — so a crash never
// leaves one half-written for the next start to half-read.
package statefile
