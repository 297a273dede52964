package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Ports are the loopback ports one collector listens on.
type Ports struct {
	OTLPGRPC int // OTLP receiver, gRPC
	OTLPHTTP int // OTLP receiver, HTTP
	Metrics  int // internal telemetry, Prometheus text at /metrics
	Health   int // health_check extension
}

// FreePorts picks four distinct free ports on 127.0.0.1.
func FreePorts() (Ports, error) {
	ps, err := freePorts(4)
	if err != nil {
		return Ports{}, err
	}
	return Ports{OTLPGRPC: ps[0], OTLPHTTP: ps[1], Metrics: ps[2], Health: ps[3]}, nil
}

// freePorts holds all n listeners open until every port is known, so the
// ports are distinct; the kernel hands out ephemeral ports in sequence, so a
// port closed here is not handed to another listener soon after.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Addr is "127.0.0.1:port".
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// HealthURL is the health_check endpoint of a collector on p.
func (p Ports) HealthURL() string { return "http://" + Addr(p.Health) + "/" }

// MetricsURL is the internal metrics endpoint of a collector on p.
func (p Ports) MetricsURL() string { return "http://" + Addr(p.Metrics) + "/metrics" }

// OTLPHTTPURL is the base URL of the OTLP/HTTP receiver on p (append /v1/logs).
func (p Ports) OTLPHTTPURL() string { return "http://" + Addr(p.OTLPHTTP) }

// Collector is one running otelcol-dedup process.
type Collector struct {
	// PID is the process id; Stop signals exactly this process.
	PID int

	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	waitErr error

	stopOnce sync.Once
	stopErr  error
}

// StartCollector starts binary with the given --config arguments (files or
// confmap URIs, merged in order by the collector), its stdout and stderr going
// to output. It does not wait for readiness: see WaitHealthy.
func StartCollector(binary string, output io.Writer, configs ...string) (*Collector, error) {
	if len(configs) == 0 {
		return nil, errors.New("e2e: StartCollector needs at least one --config")
	}
	args := make([]string, 0, 2*len(configs))
	for _, c := range configs {
		args = append(args, "--config", c)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout = output
	cmd.Stderr = output
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("e2e: start %s: %w", binary, err)
	}
	c := &Collector{PID: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// Exited is closed once the process has exited.
func (c *Collector) Exited() <-chan struct{} { return c.done }

// WaitHealthy polls the health_check endpoint until it answers 200, the
// process exits (a bad config, a port in use: the error says so and the
// process output tells why), or ctx ends.
func (c *Collector) WaitHealthy(ctx context.Context, healthURL string) error {
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, healthURL, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-c.done:
			return fmt.Errorf("e2e: collector (pid %d) exited before it was healthy: %v", c.PID, c.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("e2e: collector (pid %d) not healthy at %s: %w", c.PID, healthURL, ctx.Err())
		case <-tick.C:
		}
	}
}

// Stop sends SIGTERM to the process, waits up to grace for a clean shutdown
// (the collector flushes its batch processor and exporters on the way), then
// sends SIGKILL. It returns an error if the process had to be killed or did
// not exit cleanly. Stop is idempotent.
func (c *Collector) Stop(grace time.Duration) error {
	c.stopOnce.Do(func() { c.stopErr = c.stop(grace) })
	return c.stopErr
}

// Kill sends SIGKILL, as a crash or the OOM killer would, and waits for the
// process to exit. A later Stop does nothing and returns nil.
func (c *Collector) Kill() {
	c.stopOnce.Do(func() {
		select {
		case <-c.done:
			c.stopErr = exitError(c.PID, c.waitErr)
			return
		default:
		}
		_ = syscall.Kill(c.PID, syscall.SIGKILL)
		<-c.done
	})
}

func (c *Collector) stop(grace time.Duration) error {
	select {
	case <-c.done:
		return exitError(c.PID, c.waitErr)
	default:
	}
	if err := syscall.Kill(c.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("e2e: SIGTERM pid %d: %w", c.PID, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-c.done:
		return exitError(c.PID, c.waitErr)
	case <-timer.C:
	}
	_ = syscall.Kill(c.PID, syscall.SIGKILL)
	<-c.done
	return fmt.Errorf("e2e: collector (pid %d) did not stop within %s of SIGTERM and was killed", c.PID, grace)
}

func exitError(pid int, err error) error {
	if err != nil {
		return fmt.Errorf("e2e: collector (pid %d) exited: %w", pid, err)
	}
	return nil
}

// LogFile creates path for a collector's output.
func LogFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
}
