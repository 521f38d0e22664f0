package sandbox

import "testing"

// TestFindsGroups reads /proc/self/cgroup and mountinfo as three hosts
// write them: a hybrid v1 host (this one's layout), a systemd host on v2
// only, and a container whose mounts start below the host's root.
func TestFindsGroups(t *testing.T) {
	for _, tc := range []struct {
		name, cgroup, mountinfo string
		ctl, want               string
	}{
		{"v1", "4:memory:/process_api/dc11\n8:pids:/\n0::/\n",
			"32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
			"memory", "/sys/fs/cgroup/memory/process_api/dc11"},
		{"v2", "0::/system.slice/plumb-server.service\n",
			"30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
			"", "/sys/fs/cgroup/system.slice/plumb-server.service"},
		{"container", "0::/kubepods/pod1/c1\n",
			"700 690 0:26 /kubepods/pod1 /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n",
			"", "/sys/fs/cgroup/c1"},
		{"escaped mount point", "0::/a\n",
			`30 23 0:26 / /mnt/my\040cgroups rw - cgroup2 cgroup2 rw` + "\n",
			"", "/mnt/my cgroups/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := cgroupMounts([]byte(tc.mountinfo))[tc.ctl]
			got, err := groupDir(m, ownGroups([]byte(tc.cgroup))[tc.ctl])
			if err != nil || got != tc.want {
				t.Fatalf("group dir = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	// A group outside what is mounted cannot be reached.
	if _, err := groupDir(mount{dir: "/sys/fs/cgroup", root: "/kubepods/pod1"}, "/other"); err == nil {
		t.Fatal("a group outside the mount's root was given a directory")
	}
}
