package runconfig

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// rdzvKey is one key accepted in --rdzv-conf.
type rdzvKey struct {
	name string
	// field is the Config duration the key sets; nil for keys that are only
	// stored (checked to be durations) or ignored.
	field func(*Config) *time.Duration
	// duration says the value must parse as a duration even without field.
	duration bool
	def      string // for Usage; "" for stored/ignored keys
	help     string
}

// rdzvKeys lists the --rdzv-conf keys, in the order Usage shows them.
var rdzvKeys = []rdzvKey{
	{name: "join_timeout", field: func(c *Config) *time.Duration { return &c.JoinTimeout }, def: "600s",
		help: "how long a rendezvous waits for the minimum number of nodes"},
	{name: "last_call_timeout", field: func(c *Config) *time.Duration { return &c.LastCallTimeout }, def: "30s",
		help: "extra wait for more nodes once the minimum has joined"},
	{name: "lastcall_timeout", field: func(c *Config) *time.Duration { return &c.LastCallTimeout }, def: "30s",
		help: "DLRover's spelling of last_call_timeout"},
	{name: "close_timeout", field: func(c *Config) *time.Duration { return &c.CloseTimeout }, def: "30s",
		help: "how long a closing rendezvous waits for nodes to leave"},
	{name: "heartbeat_timeout", field: func(c *Config) *time.Duration { return &c.HeartbeatTimeout }, def: "30s",
		help: "a node without a heartbeat for this long is declared dead (a frozen node: its session stays open)"},
	{name: "master_timeout", field: func(c *Config) *time.Duration { return &c.MasterTimeout }, def: "600s",
		help: "how long the agent keeps its workers running while it cannot reach the master"},
	{name: "disconnect_grace", field: func(c *Config) *time.Duration { return &c.DisconnectGrace }, def: "5s",
		help: "grace period after a node's connection to the master drops"},
	{name: "hang_timeout", duration: true,
		help: "same as --hang-timeout; the flag wins when both are given"},
	{name: "pend_timeout", duration: true,
		help: "DLRover key (how long a node left out of a world waits): accepted and checked, no effect: such a node waits for the next round until the job ends"},
	{name: "read_timeout", help: "torchrun key: accepted and ignored"},
	{name: "keep_alive_interval", help: "torchrun key: accepted and ignored"},
	{name: "keep_alive_max_attempt", help: "torchrun key: accepted and ignored"},
	{name: "timeout", help: "torchrun key: accepted and ignored"},
	{name: "is_host", help: "torchrun key: accepted and ignored"},
	{name: "use_libuv", help: "torchrun key: accepted and ignored"},
}

// setRdzvDefaults sets the timings --rdzv-conf can change to their defaults.
func setRdzvDefaults(c *Config) {
	for _, k := range rdzvKeys {
		if k.field != nil {
			d, _ := ParseSeconds(k.def)
			*k.field(c) = d
		}
	}
}

// knownRdzvKeys lists the accepted keys for error messages.
func knownRdzvKeys() string {
	names := make([]string, len(rdzvKeys))
	for i, k := range rdzvKeys {
		names[i] = k.name
	}
	return strings.Join(names, ", ")
}

// applyRdzvConf reads --rdzv-conf "k=v,k=v" into c. Empty items are skipped;
// a repeated key takes its last value. All problems are returned joined.
func applyRdzvConf(c *Config, raw string) error {
	var errs []error
	for item := range strings.SplitSeq(raw, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		key, value, _ := strings.Cut(item, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if key == "" {
			errs = append(errs, fmt.Errorf("item %q has no key; want KEY=VALUE,KEY=VALUE", item))
			continue
		}
		i := indexRdzvKey(key)
		if i < 0 {
			errs = append(errs, fmt.Errorf("unknown key %q; known keys: %s", key, knownRdzvKeys()))
			continue
		}
		if value == "" {
			errs = append(errs, fmt.Errorf("key %s has no value; write %s=VALUE", key, key))
			continue
		}
		k := rdzvKeys[i]
		if k.field != nil || k.duration {
			d, err := ParseSeconds(value)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%s: %w", key, value, err))
				continue
			}
			if k.field != nil {
				*k.field(c) = d
			}
		}
		if c.RdzvConf == nil {
			c.RdzvConf = map[string]string{}
		}
		c.RdzvConf[key] = value
	}
	return errors.Join(errs...)
}

func indexRdzvKey(name string) int {
	for i, k := range rdzvKeys {
		if k.name == name {
			return i
		}
	}
	return -1
}
