package timerslack

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// childEnv makes the test binary print each of its threads' slack and
// exit: the constructor's work, seen from a fresh process.
const childEnv = "VGPUD_TIMERSLACK_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		printSlacks()
		return
	}
	os.Exit(m.Run())
}

// printSlacks prints the slack of every thread the runtime has made by
// now (sysmon among them), one per line.
func printSlacks() {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		fmt.Println("error", err)
		return
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + task.Name() + "/timerslack_ns")
		if errors.Is(err, os.ErrPermission) {
			// Another thread's slack needs CAP_SYS_NICE to read:
			// this thread's, then.
			cur, err := Current()
			if err != nil {
				fmt.Println("error", err)
				return
			}
			fmt.Println("self", cur.Nanoseconds())
			return
		}
		if err != nil {
			fmt.Println("error", err)
			return
		}
		fmt.Println(task.Name(), strings.TrimSpace(string(b)))
	}
}

// The constructor sets what Parse says for each value of the variable,
// on every thread, and leaves the inherited slack where Parse says it
// leaves the kernel's.
func TestConstructorSetsEveryThreadsSlack(t *testing.T) {
	const inherited = 70000 // the parent's, distinct from every value below
	selfOnly := false
	for _, v := range []string{"", "250000", "1000000000", "0", "0001", "1e6", "1000000001", "18446744073709551617", "-5", " 100", "\u0661"} {
		want := int64(inherited)
		if d, set, _ := Parse(v); set {
			want = d.Nanoseconds()
		}
		out := runChild(t, v, inherited)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if strings.HasPrefix(out, "self ") {
			selfOnly = true
		} else if len(lines) < 2 {
			t.Fatalf("%s=%q: the child listed %d threads, want sysmon's too:\n%s", EnvVar, v, len(lines), out)
		}
		for _, l := range lines {
			f := strings.Fields(l)
			got, err := strconv.ParseInt(f[len(f)-1], 10, 64)
			if f[0] == "error" || err != nil {
				t.Fatalf("%s=%q: %s", EnvVar, v, l)
			}
			if got != want {
				t.Errorf("%s=%q: thread %s has slack %d ns, want %d", EnvVar, v, f[0], got, want)
			}
		}
	}
	if selfOnly {
		// Still failed if a check above failed.
		t.Skip("only each child's main thread was checked: reading sysmon's thread's slack needs CAP_SYS_NICE")
	}
}

// runChild runs the test binary in child mode with the variable at v
// (unset for ""), forked from a thread whose slack is inherited.
func runChild(t *testing.T, v string, inherited int) string {
	t.Helper()
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Locked and never unlocked: the thread, with its odd slack,
		// ends with this goroutine.
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(inherited), 0, 0, 0); err != nil {
			done <- result{err: err}
			return
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = []string{childEnv + "=1"}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, EnvVar+"=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		if v != "" {
			cmd.Env = append(cmd.Env, EnvVar+"="+v)
		}
		out, err := cmd.CombinedOutput()
		done <- result{out, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatalf("%s=%q: %v\n%s", EnvVar, v, r.err, r.out)
	}
	return string(r.out)
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want time.Duration
		set  bool
		err  string
	}{
		{"", Default, true, ""},
		{"0", 0, false, ""},
		{"000", 0, false, ""},
		{"50000", 50 * time.Microsecond, true, ""},
		{"1000000000", time.Second, true, ""},
		{"1000000001", 0, false, "at most 1000000000"},
		{"99999999999999999999999", 0, false, "at most 1000000000"},
		{"1ms", 0, false, "want nanoseconds as digits alone"},
		{"-1", 0, false, "want nanoseconds as digits alone"},
		{" 1", 0, false, "want nanoseconds as digits alone"},
	} {
		got, set, err := Parse(tc.v)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), EnvVar) {
				t.Errorf("Parse(%q) = %v, %v, %v; want an error naming %s with %q", tc.v, got, set, err, EnvVar, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want || set != tc.set {
			t.Errorf("Parse(%q) = %v, %v, %v; want %v, %v", tc.v, got, set, err, tc.want, tc.set)
		}
	}
	if err := Check(lookupOf("1ms")); err == nil {
		t.Error("Check passed 1ms")
	}
	if err := Check(lookupOf("")); err != nil {
		t.Errorf("Check refused the default: %v", err)
	}
}

// Mismatch speaks only when the thread's slack differs from what the
// variable asked for.
func TestMismatch(t *testing.T) {
	var got []string
	for _, slack := range []time.Duration{Default, 70 * time.Microsecond} {
		for _, v := range []string{"", "70000", "0", "bad"} {
			got = append(got, fmt.Sprintf("%d %q: %s", slack.Nanoseconds(), v, Mismatch(lookupOf(v), slack)))
		}
	}
	want := []string{
		`1000000 "": `,
		`1000000 "70000": the timer slack is 1ms, not the 70µs VGPUD_TIMER_SLACK_NS asks for`,
		`1000000 "0": `,
		`1000000 "bad": `,
		`70000 "": the timer slack is 70µs, not the 1ms VGPUD_TIMER_SLACK_NS asks for`,
		`70000 "70000": `,
		`70000 "0": `,
		`70000 "bad": `,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Mismatch:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if cur, err := Current(); err != nil || cur <= 0 {
		t.Errorf("Current() = %v, %v; want this thread's slack", cur, err)
	}
}

// lookupOf is an environment where EnvVar alone is set, to v.
func lookupOf(v string) func(string) (string, bool) {
	return func(name string) (string, bool) { return v, name == EnvVar }
}
