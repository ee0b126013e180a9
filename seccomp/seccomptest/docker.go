package seccomptest

import (
	"encoding/json"
	"sort"

	moby "github.com/moby/profiles/seccomp"
	libseccomp "github.com/seccomp/libseccomp-golang"
)

// DockerDefaultJSON returns Docker's default profile (moby/profiles) as
// JSON our parser admits: as moby writes it, minus the syscall names this
// libseccomp does not know (newer than the library; the compiler's ENOSYS
// stub answers them, as runc would). The dropped names are returned sorted.
func DockerDefaultJSON() ([]byte, []string, error) {
	raw, err := json.Marshal(moby.DefaultProfile())
	if err != nil {
		return nil, nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, nil, err
	}
	dropped := map[string]bool{}
	var rules []any
	for _, r := range doc["syscalls"].([]any) {
		rule := r.(map[string]any)
		var keep []any
		for _, n := range rule["names"].([]any) {
			if _, err := libseccomp.GetSyscallFromName(n.(string)); err == nil {
				keep = append(keep, n)
			} else {
				dropped[n.(string)] = true
			}
		}
		if len(keep) == 0 {
			continue
		}
		rule["names"] = keep
		rules = append(rules, rule)
	}
	doc["syscalls"] = rules
	if raw, err = json.Marshal(doc); err != nil {
		return nil, nil, err
	}
	names := make([]string, 0, len(dropped))
	for n := range dropped {
		names = append(names, n)
	}
	sort.Strings(names)
	return raw, names, nil
}
