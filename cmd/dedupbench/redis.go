package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a redis-server process the driver started on a free
// loopback port, with no persistence, in a directory of its own.
type RedisServer struct {
	Addr   string
	Port   int
	cmd    *exec.Cmd
	done   chan struct{}
	client *redis.Client
	dir    string
}

// StartRedis starts redis-server (bin) on a free loopback port and waits up
// to 10 s for PING, picking another port if another process took the first
// between the pick and the bind.
func StartRedis(bin string) (*RedisServer, error) {
	var lastErr error
	for range 5 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s, err := startRedis(bin, port)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startRedis(bin string, port int) (*RedisServer, error) {
	dir, err := os.MkdirTemp("", "dedupbench-redis-")
	if err != nil {
		return nil, err
	}
	args := []string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log")}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &RedisServer{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Port: port,
		cmd:  cmd,
		done: make(chan struct{}),
		dir:  dir,
	}
	go func() { _ = cmd.Wait(); close(s.done) }()
	s.client = redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, DisableIdentity: true})
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := s.client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			s.Stop()
			return nil, fmt.Errorf("redis-server on port %d exited: %s", port, bytes.TrimSpace(log))
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redis-server on port %d: no PING answer in 10s: %w", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PID is the server's process id.
func (s *RedisServer) PID() int { return s.cmd.Process.Pid }

// Info returns the fields of INFO section as a map.
func (s *RedisServer) Info(ctx context.Context, section string) (map[string]string, error) {
	txt, err := s.client.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	return ParseRedisInfo(txt), nil
}

// FlushAll empties the server and resets its command statistics.
func (s *RedisServer) FlushAll(ctx context.Context) error {
	if err := s.client.FlushAll(ctx).Err(); err != nil {
		return err
	}
	return s.client.ConfigResetStat(ctx).Err()
}

// Stop sends SIGTERM, waits up to 5 s, then SIGKILL, and removes the
// server's directory.
func (s *RedisServer) Stop() {
	_ = s.client.Close()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	os.RemoveAll(s.dir)
}

// ParseRedisInfo parses INFO output ("key:value" lines, "# Section"
// headers) into a map.
func ParseRedisInfo(txt string) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(txt))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// RedisCPUSeconds is used_cpu_user + used_cpu_sys of INFO cpu.
func RedisCPUSeconds(info map[string]string) (float64, error) {
	var total float64
	for _, k := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := strconv.ParseFloat(info[k], 64)
		if err != nil {
			return 0, fmt.Errorf("INFO %s=%q: %w", k, info[k], err)
		}
		total += v
	}
	return total, nil
}

// CommandStat returns the calls of one command and the server time they
// took, in microseconds, from INFO commandstats
// ("cmdstat_evalsha:calls=12,usec=3456,..."); zeros if it was never called.
// Redis counts the commands a script runs under their own names too, and
// their time also within the script's.
func CommandStat(info map[string]string, command string) (calls, usec int64, err error) {
	v, ok := info["cmdstat_"+command]
	if !ok {
		return 0, 0, nil
	}
	var haveCalls, haveUsec bool
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(kv, "=")
		switch k {
		case "calls":
			calls, err = strconv.ParseInt(val, 10, 64)
			haveCalls = true
		case "usec":
			usec, err = strconv.ParseInt(val, 10, 64)
			haveUsec = true
		}
		if err != nil {
			return 0, 0, fmt.Errorf("cmdstat_%s: %q: %w", command, kv, err)
		}
	}
	if !haveCalls || !haveUsec {
		return 0, 0, fmt.Errorf("cmdstat_%s: want calls= and usec= in %q", command, v)
	}
	return calls, usec, nil
}

// RedisBenchmarkArgs are the arguments of the baseline: pipelined
// `SET key v NX PX 600000` with random keys, from clients connections, pipeline
// commands per round trip, n commands in all.
func RedisBenchmarkArgs(port, clients, pipeline, n int) []string {
	return []string{
		"-h", "127.0.0.1", "-p", strconv.Itoa(port),
		"-c", strconv.Itoa(clients), "-P", strconv.Itoa(pipeline), "-n", strconv.Itoa(n),
		"-r", "1000000000", "--csv",
		"SET", "otelcol-dedup:bench:__rand_int__", "AAAAAAAAAAAAAAAA", "NX", "PX", "600000",
	}
}

// ParseRedisBenchmarkCSV returns the requests per second of the last test
// of redis-benchmark --csv output: a header line, then one line per test,
// `"SET ...","454545.45","0.563",...`.
func ParseRedisBenchmarkCSV(r io.Reader) (float64, error) {
	recs, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark csv: %w", err)
	}
	if len(recs) < 2 || len(recs[0]) < 2 || recs[0][1] != "rps" {
		return 0, errors.New(`redis-benchmark csv: want a "test","rps",... header and a result line`)
	}
	last := recs[len(recs)-1]
	if len(last) < 2 {
		return 0, fmt.Errorf("redis-benchmark csv: short line %q", last)
	}
	rps, err := strconv.ParseFloat(last[1], 64)
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark csv: rps %q: %w", last[1], err)
	}
	return rps, nil
}

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RedisCounts is the server's side of a run, from INFO: its CPU time and
// the commands it ran (scripts and the commands they call both counted).
type RedisCounts struct {
	CPUSeconds float64
	Calls      int64
}

// Counts reads the server's CPU time and its calls of every command.
func (s *RedisServer) Counts(ctx context.Context) (RedisCounts, error) {
	info, err := s.Info(ctx, "everything")
	if err != nil {
		return RedisCounts{}, err
	}
	cpu, err := RedisCPUSeconds(info)
	if err != nil {
		return RedisCounts{}, err
	}
	c := RedisCounts{CPUSeconds: cpu}
	for k := range info {
		if cmd, ok := strings.CutPrefix(k, "cmdstat_"); ok {
			n, _, err := CommandStat(info, cmd)
			if err != nil {
				return c, err
			}
			c.Calls += n
		}
	}
	return c, nil
}

// Sub is what the server did between before and c.
func (c RedisCounts) Sub(before RedisCounts) RedisCounts {
	return RedisCounts{CPUSeconds: c.CPUSeconds - before.CPUSeconds, Calls: c.Calls - before.Calls}
}

// Ceiling is one redis-benchmark run: what the server alone does with the
// cheapest command a dedup claim could be.
type Ceiling struct {
	Ops          int64
	OpsPerSecond float64
	CPUSeconds   float64 // the server's
}

// CPUPerOp is the server's CPU seconds per SET NX PX.
func (c Ceiling) CPUPerOp() float64 { return c.CPUSeconds / float64(c.Ops) }

// RunRedisBenchmark runs redis-benchmark (bin) with RedisBenchmarkArgs
// against s and reads the server's CPU time around it.
func RunRedisBenchmark(ctx context.Context, bin string, s *RedisServer, clients, pipeline, n int) (Ceiling, error) {
	before, err := s.Counts(ctx)
	if err != nil {
		return Ceiling{}, err
	}
	out, err := exec.CommandContext(ctx, bin, RedisBenchmarkArgs(s.Port, clients, pipeline, n)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return Ceiling{}, fmt.Errorf("redis-benchmark: %w: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return Ceiling{}, fmt.Errorf("redis-benchmark: %w", err)
	}
	rps, err := ParseRedisBenchmarkCSV(bytes.NewReader(out))
	if err != nil {
		return Ceiling{}, err
	}
	after, err := s.Counts(ctx)
	if err != nil {
		return Ceiling{}, err
	}
	return Ceiling{Ops: int64(n), OpsPerSecond: rps, CPUSeconds: after.Sub(before).CPUSeconds}, nil
}
