package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a child process the driver started and stops at the end.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string        // file holding its stderr (and stdout unless redirected)
	done chan struct{} // closed when it has exited
	err  error         // of Wait, set before done closes
}

// procs owns every process the driver starts. It is used by the driver's
// main goroutine only.
type procs struct {
	dir  string // work directory: configs and logs
	list []*proc
}

// start runs path with args, its stderr (and stdout when stdout is nil)
// going to dir/name.log. The child gets SIGTERM if the driver dies without
// stopping it (Pdeathsig), so that a crashed run leaves nothing behind:
// SIGTERM rather than SIGKILL, because nginx's master stops its workers
// on SIGTERM and a killed master leaves them running.
func (ps *procs) start(name, path string, args []string, env []string, stdout io.Writer) (*proc, error) {
	logPath := filepath.Join(ps.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stderr = f
	cmd.Stdout = f
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	ps.list = append(ps.list, p)
	return p, nil
}

// pid returns the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail returns the end of the process's log, for error messages.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// waitReady polls ready until it reports true, the process exits or the
// timeout passes.
func (p *proc) waitReady(timeout time.Duration, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready (%v); its log:\n%s", p.name, p.err, p.tail())
		}
		if ready() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v; its log:\n%s", p.name, timeout, p.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopAll stops the processes in reverse order of start: SIGTERM, then
// SIGKILL after five seconds.
func (ps *procs) stopAll() {
	for i := len(ps.list) - 1; i >= 0; i-- {
		p := ps.list[i]
		if p.exited() {
			continue
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	ps.list = nil
}

// freePorts returns n distinct free TCP ports of 127.0.0.1 as host:port.
// Another process may take one before it is used; the run then fails at
// that process's start, which says so.
func freePorts(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// tcpUp reports whether addr accepts a connection.
func tcpUp(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// httpOK reports whether GET url answers 200.
func httpOK(url string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat:
// 100 on every Linux architecture Go runs on (getconf CLK_TCK).
const clockTicks = 100

// cpuTime returns the user plus system CPU time pid has used, its threads
// included (fields 14 and 15 of /proc/PID/stat).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after it are
	// counted from its closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// rss returns the resident set size of pid (VmRSS of /proc/PID/status).
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmRSS: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// children returns the ids of the processes whose parent is ppid.
func children(ppid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			out = append(out, pid)
		}
	}
	return out
}

// sumCPU adds the CPU time of pids.
func sumCPU(pids []int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		d, err := cpuTime(pid)
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

// sumRSS adds the resident set sizes of pids.
func sumRSS(pids []int) (int64, error) {
	var total int64
	for _, pid := range pids {
		n, err := rss(pid)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
