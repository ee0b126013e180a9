package config

import "github.com/autonomic-kernel/autonomic/protocol/pathglob"

// globs refuses, by key, every glob the one matcher (protocol/pathglob)
// would refuse: a malformed glob such as "secrets[/**" must not load and
// then silently match nothing.
func (c *checker) globs(key string, gs []string) {
	for _, g := range gs {
		if err := pathglob.Valid(g); err != nil {
			c.add(key, "%q is not a valid glob (segments are path.Match patterns, ** whole segments)", g)
		}
	}
}
