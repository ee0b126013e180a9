// Command gonop does nothing: scripts/bench times its start as the cost of
// one Go runtime on the host, beside /bin/true for one C process.
package main

func main() {}
