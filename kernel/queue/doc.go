// Package queue is one kernel's part of the durable task queue that every
// kernel of one database shares (issue 25 §1; the store holds the queue).
//
// Invariant: a task runs as at most one live episode at a time, on the
// kernel that holds it. A kernel claims a task only while it has a free
// slot and its autonomy allows the task's class; it renews the claims it
// holds by heartbeat; the task's episode's ownership lease is its
// liveness once it runs. Any kernel sweeps: a task whose episode ended
// ends with it, and a task whose kernel is gone goes back to the queue. A
// claim naming an episode is a takeover: the taker fences and settles that
// episode (TakeOver) and resumes it from the replica of its last stable
// checkpoint, or, where there is none, runs the task again whole as a new
// episode — no repair is spent either way, and the task bounds how many
// takeovers it gets.
package queue
