// Package redistest starts real redis-server processes for tests: a
// standalone server (optionally with a password, an ACL user or TLS), a Redis
// Cluster and a Sentinel set-up. Every server listens on a free loopback port,
// keeps its files in t.TempDir(), and is stopped by PID when the test ends.
// Every wait is bounded, so a broken server fails the test instead of hanging
// it.
//
// The binaries are looked up on PATH, then in /usr/bin and /usr/sbin; if they
// are missing the test fails with a message naming `make deps`
// (scripts/ensure-redis.sh installs them).
package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

const (
	// readyTimeout bounds the wait for a started server to answer PING.
	readyTimeout = 10 * time.Second
	// stopTimeout bounds each of the waits for a signalled server to exit.
	stopTimeout = 5 * time.Second
	// startAttempts bounds the retries when another process grabbed the port
	// between picking it and the server binding it.
	startAttempts = 5
)

// LookPath returns the path of a Redis binary (redis-server, redis-cli),
// searching PATH, then /usr/bin and /usr/sbin. It fails the test if the binary
// is nowhere to be found.
func LookPath(tb testkit.TB, name string) string {
	tb.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/bin", "/usr/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	tb.Fatalf("redistest: %s not found on PATH, in /usr/bin or in /usr/sbin; run `make deps` (scripts/ensure-redis.sh installs redis-server and redis-tools)", name)
	return ""
}

// Option configures a standalone server.
type Option func(*config)

type config struct {
	password string // requirepass: the default user's password
	aclUser  string // an ACL user with all permissions; disables the default user
	aclPass  string
	tls      bool     // serve TLS only, with generated certificates
	extra    []string // further redis.conf lines
}

// WithPassword sets requirepass, the default user's password.
func WithPassword(password string) Option {
	return func(c *config) { c.password = password }
}

// WithACLUser adds an ACL user with every permission and the given password,
// and switches the default user off, so only this user can connect.
func WithACLUser(user, password string) Option {
	return func(c *config) { c.aclUser, c.aclPass = user, password }
}

// WithTLS makes the server accept only TLS connections (port 0, tls-port)
// with certificates generated for the test, and require a client certificate.
// Server.TLS exposes the files and a client configuration.
func WithTLS() Option {
	return func(c *config) { c.tls = true }
}

// WithConfig appends raw redis.conf lines, e.g. "maxmemory 10mb".
func WithConfig(lines ...string) Option {
	return func(c *config) { c.extra = append(c.extra, lines...) }
}

// Server is one redis-server (or sentinel) process started for a test. Its
// methods fail the test on error; they are safe for concurrent use.
type Server struct {
	tb      testkit.TB
	bin     string
	dir     string
	conf    string
	args    []string // extra command-line arguments, e.g. --sentinel
	cfg     config
	certs   *TLSFiles
	port    int
	cluster bool // cluster-enabled, with its bus on busPort
	busPort int
	// nodeTimeout is a cluster node's cluster-node-timeout.
	nodeTimeout time.Duration
	mu          sync.Mutex
	proc        *process
	paused      bool
	client      *redis.Client
	// announced is the address a cluster node announces instead of its
	// own (ClusterServers.Announce), or "".
	announced string
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
}

// Standalone starts a standalone redis-server on a free loopback port and
// stops it when the test ends.
func Standalone(tb testkit.TB, opts ...Option) *Server {
	tb.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	s := newServer(tb, cfg)
	s.startFresh()
	return s
}

func newServer(tb testkit.TB, cfg config) *Server {
	tb.Helper()
	s := &Server{
		tb:  tb,
		bin: LookPath(tb, "redis-server"),
		dir: tb.TempDir(), // registered first, so removed after the server stopped
		cfg: cfg,
	}
	s.conf = filepath.Join(s.dir, "redis.conf")
	if cfg.tls {
		s.certs = generateTLS(tb, filepath.Join(s.dir, "tls"))
	}
	tb.Cleanup(s.cleanup)
	return s
}

// startFresh picks a port and starts the server, picking another port if the
// chosen one was taken in between.
func (s *Server) startFresh() {
	s.tb.Helper()
	var lastErr error
	for range startAttempts {
		if s.cluster {
			ports := freePorts(s.tb, 2)
			s.port, s.busPort = ports[0], ports[1]
		} else {
			s.port = freePorts(s.tb, 1)[0]
		}
		s.writeConfig()
		err := s.start()
		if err == nil {
			return
		}
		lastErr = err
		if !errors.Is(err, errAddrInUse) {
			break
		}
	}
	s.tb.Fatalf("redistest: start redis-server: %v", lastErr)
}

var errAddrInUse = errors.New("address already in use")

func (s *Server) writeConfig() {
	s.tb.Helper()
	lines := []string{
		"bind 127.0.0.1",
		"save " + quote(""),
		"appendonly no",
		"dir " + quote(s.dir),
		"logfile " + quote(""),
		"daemonize no",
		"enable-debug-command local",
	}
	if s.cfg.tls {
		lines = append(lines,
			"port 0",
			"tls-port "+strconv.Itoa(s.port),
			"tls-cert-file "+quote(s.certs.ServerCertFile),
			"tls-key-file "+quote(s.certs.ServerKeyFile),
			"tls-ca-cert-file "+quote(s.certs.CAFile),
			"tls-auth-clients yes",
		)
	} else {
		lines = append(lines, "port "+strconv.Itoa(s.port))
	}
	if s.cfg.password != "" {
		lines = append(lines, "requirepass "+quote(s.cfg.password))
	}
	if s.cfg.aclUser != "" {
		lines = append(lines,
			"user "+quote(s.cfg.aclUser)+" on "+quote(">"+s.cfg.aclPass)+" ~* &* +@all",
			"user default off",
		)
	}
	if s.cluster {
		lines = append(lines,
			"cluster-enabled yes",
			"cluster-config-file nodes.conf",
			"cluster-node-timeout "+strconv.FormatInt(s.nodeTimeout.Milliseconds(), 10),
			"cluster-port "+strconv.Itoa(s.busPort),
		)
	}
	lines = append(lines, s.cfg.extra...)
	if err := os.WriteFile(s.conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		s.tb.Fatalf("redistest: write %s: %v", s.conf, err)
	}
}

// quote renders a redis.conf argument as a double-quoted string.
func quote(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(v) + `"`
}

// start launches the process and waits until it answers PING.
func (s *Server) start() error {
	log, err := os.OpenFile(filepath.Join(s.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, append([]string{s.conf}, s.args...)...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	// A server must not outlive a test binary that was killed (go test
	// -timeout). Linux sends the signal when the starting OS thread exits,
	// which the Go runtime only does for a goroutine that exits while locked
	// to its thread; no test here does that.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		close(p.done)
	}()
	s.mu.Lock()
	s.proc, s.paused = p, false
	s.mu.Unlock()

	if err := s.waitReady(p); err != nil {
		s.stopProcess(p, syscall.SIGKILL)
		tail := s.logTail(20)
		if strings.Contains(tail, "Address already in use") {
			return fmt.Errorf("%w: port %d", errAddrInUse, s.port)
		}
		if s.cfg.tls && strings.Contains(tail, "FATAL CONFIG FILE ERROR") && strings.Contains(tail, "tls") {
			return fmt.Errorf("this redis-server (%s) was built without TLS support; install Debian's redis-server (make deps): %v\n%s", s.bin, err, tail)
		}
		return fmt.Errorf("%v\nlast lines of %s:\n%s", err, filepath.Join(s.dir, "redis.log"), tail)
	}
	return nil
}

func (s *Server) waitReady(p *process) error {
	c := redis.NewClient(s.clientOptions(200 * time.Millisecond))
	defer c.Close()
	deadline := time.Now().Add(readyTimeout)
	var err error
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("redis-server exited during start-up (%v)", p.cmd.ProcessState)
		default:
		}
		// A plain TCP connect first keeps go-redis from logging every refused
		// dial while the server is still starting.
		var conn net.Conn
		if conn, err = net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond); err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		_ = conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err = c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("no PONG from %s within %s: %v", s.Addr(), readyTimeout, err)
}

func (s *Server) logTail(n int) string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// clientOptions returns go-redis options that reach this server with its
// credentials and TLS settings.
func (s *Server) clientOptions(timeout time.Duration) *redis.Options {
	o := &redis.Options{
		Addr:          s.Addr(),
		DialTimeout:   timeout,
		ReadTimeout:   timeout,
		WriteTimeout:  timeout,
		MaxRetries:    -1,
		DialerRetries: 1,
		PoolSize:      4,
		// Plain Redis does not know the maintenance-notifications handshake.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	switch {
	case s.cfg.aclUser != "":
		o.Username, o.Password = s.cfg.aclUser, s.cfg.aclPass
	case s.cfg.password != "":
		o.Password = s.cfg.password
	}
	if s.certs != nil {
		o.TLSConfig = s.certs.ClientConfig(s.tb)
	}
	return o
}

// Addr returns the server's host:port on the loopback interface.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

func (s *Server) announcedAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.announced
}

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Dir returns the server's working directory (config, log, cluster state).
func (s *Server) Dir() string { return s.dir }

// TLS returns the certificate files of a server started WithTLS, or nil.
func (s *Server) TLS() *TLSFiles { return s.certs }

// Client returns a go-redis client for assertions, authenticated and with TLS
// as the server requires. It is closed when the test ends.
func (s *Server) Client() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		s.client = redis.NewClient(s.clientOptions(5 * time.Second))
	}
	return s.client
}

// Running reports whether the server's process runs and is not paused.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.paused
}

// Kill stops the server with SIGKILL, as a crash would, and waits for it to
// exit.
func (s *Server) Kill() {
	s.tb.Helper()
	s.halt(syscall.SIGKILL)
}

// KillCaughtUp kills the server (SIGKILL) at a moment its replicas hold
// every write it took: it pauses client writes, waits until each replica's
// offset reaches its own, then kills it. Redis replicates asynchronously, so
// a master killed at any other moment may take its last writes with it.
func (s *Server) KillCaughtUp() {
	s.tb.Helper()
	ctx := context.Background()
	c := s.Client()
	if err := c.Do(ctx, "client", "pause", 60_000, "write").Err(); err != nil {
		s.tb.Fatalf("redistest: CLIENT PAUSE on %s: %v", s.Addr(), err)
	}
	waitFor(s.tb, 10*time.Second, "replicas caught up with "+s.Addr(), func() (bool, string) {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return false, err.Error()
		}
		var master string
		var replicas []string
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
				master = v
			}
			if strings.HasPrefix(line, "slave") {
				for _, f := range strings.Split(line, ",") {
					if v, ok := strings.CutPrefix(f, "offset="); ok {
						replicas = append(replicas, v)
					}
				}
			}
		}
		caughtUp := len(replicas) > 0
		for _, r := range replicas {
			caughtUp = caughtUp && r == master
		}
		return caughtUp, fmt.Sprintf("master offset %s, replicas %v", master, replicas)
	})
	s.Kill()
}

// Stop stops the server with SIGTERM (SIGKILL if it does not exit in time).
func (s *Server) Stop() {
	s.tb.Helper()
	s.halt(syscall.SIGTERM)
}

func (s *Server) halt(sig syscall.Signal) {
	s.tb.Helper()
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p != nil {
		s.stopProcess(p, sig)
	}
}

// Restart stops the server if it runs and starts it again on the same port
// with the same configuration, waiting until it answers PING. The data set is
// lost (persistence is off); a cluster node keeps its nodes.conf.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		s.tb.Fatalf("redistest: restart %s: %v", s.Addr(), err)
	}
}

// Pause freezes the server with SIGSTOP: connections stay open but nothing
// is answered, as with an overloaded or stalled server. Resume undoes it; the
// end of the test resumes it too.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP, true) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, paused bool) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		s.tb.Fatalf("redistest: %s is not running", s.Addr())
	}
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("redistest: signal %v to %s: %v", sig, s.Addr(), err)
	}
	s.paused = paused
}

// stopProcess signals p and waits, bounded, for it to be reaped. A stopped
// (SIGSTOP) process is continued first so that SIGTERM can take effect.
func (s *Server) stopProcess(p *process, sig syscall.Signal) {
	s.mu.Lock()
	paused := s.paused
	s.paused = false
	s.mu.Unlock()
	if paused {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return
	case <-time.After(stopTimeout):
	}
	if sig != syscall.SIGKILL {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-p.done:
			return
		case <-time.After(stopTimeout):
		}
	}
	s.tb.Errorf("redistest: redis-server pid %d on %s did not exit within %s", p.cmd.Process.Pid, s.Addr(), 2*stopTimeout)
}

func (s *Server) cleanup() {
	s.mu.Lock()
	c := s.client
	s.client = nil
	s.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
	s.Stop()
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// The listeners are held until all n are picked so the kernel does not hand
// out the same port twice.
func freePorts(tb testkit.TB, n int) []int {
	tb.Helper()
	ports := make([]int, 0, n)
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for len(ports) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("redistest: pick a free port: %v", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// ClientTLS is a shorthand for s.TLS().ClientConfig(tb).
func (s *Server) ClientTLS() *tls.Config {
	s.tb.Helper()
	if s.certs == nil {
		s.tb.Fatalf("redistest: %s was not started WithTLS", s.Addr())
	}
	return s.certs.ClientConfig(s.tb)
}
