package redistier

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Mode is how the tier reaches Redis: what the endpoints are.
type Mode string

// The modes. In a Cluster, one node (e.g. a managed service's configuration
// endpoint) is enough.
const (
	ModeAuto       Mode = "auto" // ask the endpoints
	ModeStandalone Mode = "standalone"
	ModeCluster    Mode = "cluster"
	ModeSentinel   Mode = "sentinel" // Sentinels monitoring MasterName
)

// errNoAnswer wraps discovery errors where no endpoint told what it is (none
// answered, or each refused the credentials); the rest are bad
// configurations.
var errNoAnswer = errors.New("no endpoint told what it is")

// minProbeTimeout: a probe (dial, TLS, AUTH, two round trips) costs more than
// a call; start can wait.
const minProbeTimeout = time.Second

// probe is what one endpoint said it is.
type probe struct {
	addr     string
	mode     string // standalone, cluster, sentinel
	replica  bool
	master   string   // a replica's master
	monitors []string // a Sentinel's masters
	err      error    // no answer
}

// discover asks every endpoint at once what it is, and decides the topology.
func (t *Tier) discover(ctx context.Context) (Mode, error) {
	ctx, cancel := context.WithTimeout(ctx, max(t.opts.Timeout, minProbeTimeout))
	defer cancel()
	probes := make([]probe, len(t.opts.Endpoints))
	var wg sync.WaitGroup
	for i, addr := range t.opts.Endpoints {
		wg.Go(func() { probes[i] = t.ask(ctx, addr) })
	}
	wg.Wait()
	return decide(&t.opts, probes)
}

// ask probes addr the way go-redis will reach it: a Sentinel without
// credentials (they are the master's: go-redis sends none to Sentinels, and a
// Sentinel that refused them would log a failed login per start), anything
// else with them.
func (t *Tier) ask(ctx context.Context, addr string) probe {
	if t.opts.MasterName != "" {
		if p := t.probe(ctx, addr, false); p.err == nil && p.mode == string(ModeSentinel) {
			return p
		}
	}
	p := t.probe(ctx, addr, true)
	switch {
	case p.err == nil:
	case strings.Contains(p.err.Error(), "without any password configured"):
		// A Sentinel without credentials of its own: ask it without.
		p = t.probe(ctx, addr, false)
	case redis.IsAuthError(p.err) && t.opts.MasterName == "":
		// A Sentinel listed without redis.master_name: say so, rather than
		// that it refused the credentials.
		if q := t.probe(ctx, addr, false); q.err == nil && q.mode == string(ModeSentinel) {
			p = q
		}
	}
	return p
}

// probe asks an endpoint what it is: HELLO (Redis >= 6) answers mode and role,
// else INFO server; ROLE names a replica's master or a Sentinel's masters.
func (t *Tier) probe(ctx context.Context, addr string, credentials bool) probe {
	o := &redis.Options{
		Addr:            addr,
		TLSConfig:       t.opts.TLS,
		Protocol:        2, // no HELLO 3 on connect: the probe sends its own HELLO
		DisableIdentity: true,
		MaxRetries:      -1,
		DialerRetries:   1,
		// One connection: a pool whose every dial failed starts a goroutine
		// outliving the probe.
		PoolSize:                 2,
		ContextTimeoutEnabled:    true,
		DialTimeout:              max(t.opts.Timeout, minProbeTimeout),
		ReadTimeout:              max(t.opts.Timeout, minProbeTimeout),
		WriteTimeout:             max(t.opts.Timeout, minProbeTimeout),
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
	} else if !isReply(err) || Denied(err) {
		p.err = err
		return p
	}
	if p.mode == "" {
		info := c.InfoMap(ctx, "server")
		if err := info.Err(); err != nil {
			p.err = fmt.Errorf("HELLO and INFO failed: %w", err)
			return p
		}
		p.mode = info.Item("Server", "redis_mode")
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
	if kindName[p.mode] == "" {
		p.err = fmt.Errorf("unknown server mode %q", p.mode)
	}
	return p
}

// decide chooses the topology from the probes that answered: Cluster nodes,
// Sentinels monitoring MasterName, or one standalone master. Anything else
// (a replica, Sentinels without a master name, mixed kinds, a Mode they
// contradict) cannot work, and the error names the setting to change.
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
				kindName[first.mode], first.addr, kindName[p.mode], p.addr)
		}
	}
	found := Mode(first.mode) // probe checked it is one of the modes
	if o.Mode != ModeAuto && o.Mode != found {
		return "", fmt.Errorf("redis.mode is %q but %s is a %s; set redis.mode to %q (or \"auto\")", o.Mode, first.addr, kindName[first.mode], found)
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
				if !slices.Contains(monitored, m) {
					monitored = append(monitored, m)
				}
			}
		}
		if o.MasterName == "" {
			return "", fmt.Errorf("redis.endpoints are Sentinels (%s) but redis.master_name is empty; set it to the master they monitor (%s)", first.addr, strings.Join(monitored, ", "))
		}
		if len(monitored) > 0 && !slices.Contains(monitored, o.MasterName) {
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

// kindName names the endpoint each mode a probe accepts stands for.
var kindName = map[string]string{"standalone": "standalone server", "cluster": "Redis Cluster node", "sentinel": "Sentinel"}
