package broker_test

import (
	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/governor"
)

// The broker's package cannot import the governor (the governor imports
// it); this external test file can, and links the production lease check
// into the package's tests before any of them runs.
func init() { broker.ProductionLeaseCheck = governor.LeaseCheckWith }
