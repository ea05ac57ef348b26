package exepages

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReadOnlyMappingsKeepsOnlyTheBinarysReadOnlyMappings(t *testing.T) {
	const exe = "/opt/my tools/vgpud (deleted)"
	maps := strings.Join([]string{
		"00400000-00411000 r--p 00000000 fe:00 42                                 /opt/my tools/vgpud (deleted)",
		"00411000-01cb5000 r-xp 00011000 fe:00 42                                 /opt/my tools/vgpud (deleted)",
		"01cb5000-0392f000 r--p 018b5000 fe:00 42                                 /opt/my tools/vgpud (deleted)",
		"03930000-039d8000 rw-p 0352f000 fe:00 42                                 /opt/my tools/vgpud (deleted)",
		"039d8000-03a00000 rw-p 00000000 00:00 0 ",
		"7f0000000000-7f0000021000 r-xp 00000000 fe:00 7                          /usr/lib/x86_64-linux-gnu/libc.so.6",
		"7f0000021000-7f0000022000 r--p 00000000 fe:00 43                         /opt/my tools/vgpud",
		"7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]",
	}, "\n")
	got, err := ReadOnlyMappings(strings.NewReader(maps), exe)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapping{{0x400000, 0x411000}, {0x411000, 0x1cb5000}, {0x1cb5000, 0x392f000}}
	if len(got) != len(want) {
		t.Fatalf("mappings %x, want %x", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("mappings %x, want %x", got, want)
		}
	}
}

func TestReadOnlyMappingsRefusesABadRange(t *testing.T) {
	_, err := ReadOnlyMappings(strings.NewReader("zz-01 r-xp 0 fe:00 1 /bin/x\n"), "/bin/x")
	if err == nil || !strings.Contains(err.Error(), `bad address range "zz-01"`) {
		t.Fatalf("err %v, want a bad address range", err)
	}
}

// TestReleaseUnmapsTheBinarysPages releases this test binary's own pages
// and reads back, from the kernel, how much of its read-only mappings
// stays resident: only what ran since.
func TestReleaseUnmapsTheBinarysPages(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	before := binaryResidentKiB(t, exe)
	if before < 1024 {
		t.Fatalf("only %d KiB of %s resident before the release; the test needs a binary in use", before, exe)
	}
	st, err := Release()
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		t.Skipf("this kernel does not page out on advice (Linux 5.4+): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	after := binaryResidentKiB(t, exe)
	t.Logf("%s resident: %d KiB before, %d KiB after; process RSS %d -> %d bytes", exe, before, after, st.Before, st.After)
	if after*2 > before {
		t.Fatalf("%d KiB of the binary resident after the release, from %d: want less than half", after, before)
	}
	if st.Before <= 0 || st.After <= 0 || st.After >= st.Before {
		t.Fatalf("process RSS %d -> %d bytes: want it read and lower after", st.Before, st.After)
	}
}

// binaryResidentKiB sums the Rss of exe's read-only mappings in
// /proc/self/smaps.
func binaryResidentKiB(t *testing.T, exe string) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kib int
	var in bool
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = strings.HasSuffix(line, " "+exe) && !strings.Contains(fields[1], "w")
			continue
		}
		if in && len(fields) >= 2 && fields[0] == "Rss:" {
			n, _ := strconv.Atoi(fields[1])
			kib += n
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return kib
}
