// Package wire is how the launcher's processes talk: the names they are
// started under, the messages between the monitor, the init, the stage,
// the notifier and the checkpoint helper (SOCK_SEQPACKET, one JSON message
// a packet, descriptors attached), and the deadlines they share.
//
// Privilege: none.
package wire
