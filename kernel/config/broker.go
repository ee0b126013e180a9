package config

// The broker's bounds (issue 16): what one patch may expand to and what git
// may use building it, what one episode's prepares may cost, how long
// payloads are kept, and the disk reserve. Kept in this file, apart from
// the policy keys, so both can change without touching each other.

// Broker bounds the effect broker. Absent keys take the defaults below.
type Broker struct {
	// MaxPatchResultBytes caps what one git_commit patch adds (binary
	// results and added lines), measured from the patch before git runs.
	MaxPatchResultBytes int `json:"max_patch_result_bytes"`
	// GitMemoryBytes is every broker git's RLIMIT_AS.
	GitMemoryBytes int `json:"git_memory_bytes"`
	// GitTimeoutMS bounds one git invocation.
	GitTimeoutMS int `json:"git_timeout_ms"`
	// GitMaxOutputBytes bounds what one git invocation may print.
	GitMaxOutputBytes int `json:"git_max_output_bytes"`
	// PreparesPerEpisode, PreparesPerMinute and PayloadBytesPerEpisode
	// are each episode's prepare quotas.
	PreparesPerEpisode     int `json:"prepares_per_episode"`
	PreparesPerMinute      int `json:"prepares_per_minute"`
	PayloadBytesPerEpisode int `json:"payload_bytes_per_episode"`
	// PayloadRetentionHours keeps the payloads and response bodies of
	// settled effects and ended episodes this long.
	PayloadRetentionHours int `json:"payload_retention_hours"`
	// DiskReserveBytes is the free space the payload store's and the
	// repositories' filesystems keep; nil: the default, 0: none.
	DiskReserveBytes *int `json:"disk_reserve_bytes"`
	// EscalateOutsideLease puts a proposal its episode's lease does not
	// grant to a human (broker.Config.EscalateOutsideLease) instead of
	// refusing it. Off by default: the lease is a hard wall.
	EscalateOutsideLease bool `json:"escalate_outside_lease"`
}

// Broker defaults.
const (
	DefaultMaxPatchResultBytes    = 64 << 20
	DefaultGitMemoryBytes         = 1 << 30
	DefaultGitTimeoutMS           = 30000
	DefaultGitMaxOutputBytes      = 4 << 20
	DefaultPreparesPerEpisode     = 2000
	DefaultPreparesPerMinute      = 120
	DefaultPayloadBytesPerEpisode = 256 << 20
	DefaultPayloadRetentionHours  = 168
	DefaultDiskReserveBytes       = 1 << 30
)

// DiskReserveBytesValue is broker.disk_reserve_bytes with its default.
func (b Broker) DiskReserveBytesValue() int {
	if b.DiskReserveBytes == nil {
		return DefaultDiskReserveBytes
	}
	return *b.DiskReserveBytes
}

func checkBroker(c *checker, b *Broker) {
	c.defaulted("broker.max_patch_result_bytes", &b.MaxPatchResultBytes, DefaultMaxPatchResultBytes, 1024, 1<<32)
	c.defaulted("broker.git_memory_bytes", &b.GitMemoryBytes, DefaultGitMemoryBytes, 64<<20, 1<<36)
	c.defaulted("broker.git_timeout_ms", &b.GitTimeoutMS, DefaultGitTimeoutMS, 1000, 600000)
	c.defaulted("broker.git_max_output_bytes", &b.GitMaxOutputBytes, DefaultGitMaxOutputBytes, 64<<10, 1<<30)
	c.defaulted("broker.prepares_per_episode", &b.PreparesPerEpisode, DefaultPreparesPerEpisode, 1, 1<<30)
	c.defaulted("broker.prepares_per_minute", &b.PreparesPerMinute, DefaultPreparesPerMinute, 1, 1<<20)
	c.defaulted("broker.payload_bytes_per_episode", &b.PayloadBytesPerEpisode, DefaultPayloadBytesPerEpisode, 1<<20, 1<<40)
	c.defaulted("broker.payload_retention_hours", &b.PayloadRetentionHours, DefaultPayloadRetentionHours, 1, 24*3650)
	c.optional("broker.disk_reserve_bytes", b.DiskReserveBytes, 0, 1<<50)
}
