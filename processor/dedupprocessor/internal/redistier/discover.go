package redistier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Mode is how the tier reaches Redis: what the endpoints are.
type Mode string

const (
	// ModeAuto asks the endpoints what they are (discover).
	ModeAuto Mode = "auto"
	// ModeStandalone: one standalone server (a master).
	ModeStandalone Mode = "standalone"
	// ModeCluster: nodes of one Redis Cluster; one is enough, e.g. a managed
	// service's configuration endpoint.
	ModeCluster Mode = "cluster"
	// ModeSentinel: Sentinels that monitor the master named MasterName.
	ModeSentinel Mode = "sentinel"
)

// errNoAnswer is wrapped by discovery errors that mean no endpoint told what
// it is (refused, timed out, failed the handshake): nothing was decided.
// Every other discovery error is a configuration that cannot work.
var errNoAnswer = errors.New("no endpoint answered")

// minProbeTimeout bounds a probe from below: a probe costs a dial, the
// handshake (TLS, AUTH) and two round trips, more than the tier's per-call
// timeout allows for, and a start that takes a second longer because Redis is
// unreachable costs nothing.
const minProbeTimeout = time.Second

// probe is what one endpoint said it is.
type probe struct {
	addr     string
	mode     string   // HELLO's or INFO's mode: standalone, cluster, sentinel
	replica  bool     // a standalone or Cluster replica
	master   string   // the master a standalone replica follows (ROLE)
	monitors []string // the masters a Sentinel monitors (ROLE)
	err      error    // no answer
}

// discover asks every endpoint at once what it is, and decides the topology.
// A mode set in the options is checked against the answers.
func (t *Tier) discover(ctx context.Context) (Mode, error) {
	ctx, cancel := context.WithTimeout(ctx, max(t.timeout, minProbeTimeout))
	defer cancel()
	probes := make([]probe, len(t.opts.Endpoints))
	var wg sync.WaitGroup
	for i, addr := range t.opts.Endpoints {
		wg.Go(func() { probes[i] = t.probe(ctx, addr) })
	}
	wg.Wait()
	return decide(&t.opts, probes)
}

// probe asks one endpoint what it is: HELLO without arguments (Redis >= 6)
// answers the mode and the role in one round trip without switching the
// protocol; a server that refuses it is asked INFO server. ROLE then names a
// replica's master, or the masters a Sentinel monitors.
func (t *Tier) probe(ctx context.Context, addr string) probe {
	p := t.ask(ctx, addr, true)
	if p.err != nil && strings.Contains(p.err.Error(), "without any password configured") {
		// A Sentinel has its own credentials, which the tier does not use:
		// ask it without.
		p = t.ask(ctx, addr, false)
	}
	return p
}

func (t *Tier) ask(ctx context.Context, addr string, credentials bool) probe {
	o := &redis.Options{
		Addr:            addr,
		TLSConfig:       t.opts.TLS,
		Protocol:        2, // no HELLO 3 on connect: the probe sends its own HELLO
		DisableIdentity: true,
		MaxRetries:      -1,
		DialerRetries:   1,
		// The probe uses one connection. A pool whose every connection
		// failed to dial starts a goroutine that dials again every
		// second, which would outlive the probe.
		PoolSize:              2,
		ContextTimeoutEnabled: true,
		DialTimeout:           max(t.timeout, minProbeTimeout),
		ReadTimeout:           max(t.timeout, minProbeTimeout),
		WriteTimeout:          max(t.timeout, minProbeTimeout),
		// Plain Redis does not know the maintenance-notifications handshake.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if credentials {
		o.Username, o.Password = t.opts.Username, t.opts.Password
	}
	c := redis.NewClient(o)
	defer c.Close()
	p := probe{addr: addr}
	role := ""
	if fields, err := c.Do(ctx, "hello").Slice(); err == nil {
		for i := 0; i+1 < len(fields); i += 2 {
			switch fmt.Sprint(fields[i]) {
			case "mode":
				p.mode = fmt.Sprint(fields[i+1])
			case "role":
				role = fmt.Sprint(fields[i+1])
			}
		}
	} else if !isReply(err) {
		p.err = err
		return p
	}
	if p.mode == "" {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			p.err = fmt.Errorf("HELLO and INFO failed: %w", err)
			return p
		}
		p.mode = infoField(info, "redis_mode")
	}
	if role == "" || role == "replica" || p.mode == "sentinel" {
		r, err := c.Do(ctx, "role").Slice()
		if err != nil {
			p.err = fmt.Errorf("ROLE: %w", err)
			return p
		}
		if len(r) > 0 {
			role = fmt.Sprint(r[0])
		}
		switch {
		case role == "slave" && len(r) >= 3:
			p.master = fmt.Sprintf("%v:%v", r[1], r[2])
		case role == "sentinel" && len(r) >= 2:
			names, _ := r[1].([]any)
			for _, n := range names {
				p.monitors = append(p.monitors, fmt.Sprint(n))
			}
		}
	}
	p.replica = role == "replica" || role == "slave"
	switch p.mode {
	case "standalone", "cluster", "sentinel":
	default:
		p.err = fmt.Errorf("unknown server mode %q", p.mode)
	}
	return p
}

func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// decide chooses the topology from the probes, skipping endpoints that did
// not answer if another one did: Cluster if the endpoints are Cluster nodes
// (one is enough), Sentinel if they are Sentinels (and MasterName names a
// master they monitor), standalone if the one endpoint is a standalone
// master. Anything else is a configuration that cannot work, and the error
// says which setting to change.
func decide(o *Options, probes []probe) (Mode, error) {
	var answered []probe
	var errs []error
	for _, p := range probes {
		if p.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.addr, p.err))
			continue
		}
		answered = append(answered, p)
	}
	if len(answered) == 0 {
		return "", fmt.Errorf("%w: %w", errNoAnswer, errors.Join(errs...))
	}
	first := answered[0]
	for _, p := range answered[1:] {
		if p.mode != first.mode {
			return "", fmt.Errorf("redis.endpoints mix a %s (%s) and a %s (%s); list endpoints of one kind",
				kindName(first.mode), first.addr, kindName(p.mode), p.addr)
		}
	}
	found := map[string]Mode{"standalone": ModeStandalone, "cluster": ModeCluster, "sentinel": ModeSentinel}[first.mode]
	if o.Mode != ModeAuto && o.Mode != found {
		return "", fmt.Errorf("redis.mode is %q but %s is a %s; set redis.mode to %q (or \"auto\")", o.Mode, first.addr, kindName(first.mode), found)
	}
	switch found {
	case ModeCluster:
		if o.MasterName != "" {
			return "", fmt.Errorf("redis.master_name is set but %s is a Redis Cluster node, not a Sentinel; remove redis.master_name", first.addr)
		}
		if o.DB != 0 {
			return "", fmt.Errorf("redis.db must be 0 with a Redis Cluster (%s is a Cluster node), got %d", first.addr, o.DB)
		}
	case ModeSentinel:
		var monitored []string
		for _, p := range answered {
			for _, m := range p.monitors {
				if !contains(monitored, m) {
					monitored = append(monitored, m)
				}
			}
		}
		if o.MasterName == "" {
			return "", fmt.Errorf("redis.endpoints are Sentinels (%s) but redis.master_name is empty; set it to the master they monitor (%s)", first.addr, strings.Join(monitored, ", "))
		}
		if len(monitored) > 0 && !contains(monitored, o.MasterName) {
			return "", fmt.Errorf("redis.master_name %q is not monitored by the Sentinels (%s); they monitor %s", o.MasterName, first.addr, strings.Join(monitored, ", "))
		}
	case ModeStandalone:
		if first.replica {
			return "", fmt.Errorf("redis.endpoints: %s is a read-only replica of %s; list the master %s instead (or its Sentinels, with redis.master_name)", first.addr, first.master, first.master)
		}
		if o.MasterName != "" {
			return "", fmt.Errorf("redis.master_name is set but %s is a standalone server, not a Sentinel; remove redis.master_name, or list the Sentinels in redis.endpoints", first.addr)
		}
		if len(o.Endpoints) > 1 {
			return "", fmt.Errorf("redis.endpoints lists %d endpoints but %s is a standalone server; list one standalone server, the nodes of one Redis Cluster, or Sentinels with redis.master_name", len(o.Endpoints), first.addr)
		}
	}
	return found, nil
}

func kindName(mode string) string {
	switch mode {
	case "cluster":
		return "Redis Cluster node"
	case "sentinel":
		return "Sentinel"
	}
	return "standalone server"
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
