package autoscale

import "time"

// Action is what a decision asks the master to do.
type Action string

// Actions.
const (
	Hold    Action = "hold"    // keep the world as it is
	Grow    Action = "grow"    // raise the target world to Decision.To nodes
	Shrink  Action = "shrink"  // lower it to Decision.To nodes, giving the last ones back
	Replace Action = "replace" // replace Decision.Node with a fresh node
	// Migrate: see ps.go.
)

// Reason is a decision's bounded reason code (a metric label); the
// decision's Message says the same in a sentence.
type Reason string

// Reasons.
const (
	ReasonNoRound          Reason = "no_round"           // hold: no world yet
	ReasonWaitingForChange Reason = "waiting_for_change" // hold: the last change has not formed its round yet
	ReasonCoolDown         Reason = "cool_down"          // hold: too soon after the last change
	ReasonOutOfRange       Reason = "size_out_of_range"  // hold: the world is outside MinNodes..MaxNodes
	ReasonMeasuring        Reason = "measuring"          // hold: the current size is not measured well enough yet
	ReasonAtMax            Reason = "at_max"             // hold: the next size would pass MaxNodes
	ReasonNoCapacity       Reason = "no_capacity"        // hold: the platform cannot place the next nodes
	ReasonGainInBand       Reason = "gain_in_band"       // hold: growing would not pay, shrinking is not warranted
	ReasonTriedAndLost     Reason = "tried_and_lost"     // hold: the next size was tried and given back lately
	ReasonPredictedGain    Reason = "predicted_gain"     // grow: the next nodes are predicted to pay
	ReasonMeasuredLoss     Reason = "measured_loss"      // shrink: the last nodes measurably do not pay
	ReasonStraggler        Reason = "straggler"          // replace: a node stayed a straggler
)

// Reasons lists every Reason, for metrics that pre-declare their labels.
var Reasons = []Reason{ReasonNoRound, ReasonWaitingForChange, ReasonCoolDown, ReasonOutOfRange, ReasonMeasuring,
	ReasonAtMax, ReasonNoCapacity, ReasonGainInBand, ReasonTriedAndLost, ReasonPredictedGain, ReasonMeasuredLoss, ReasonStraggler,
	ReasonPSHot, ReasonAllPSHot, ReasonPSCool}

// Decision is the policy's answer at a time. From is the current world
// size; To is the size asked for (From for Hold and Replace). Any Grow or
// Shrink has To within MinNodes..MaxNodes. Gain is the marginal gain that
// decided (see [Config]), or for Replace the share of throughput the
// straggler costs; 0 where none applies.
type Decision struct {
	Action Action `json:"action"`
	// Group is the node group the decision is about: "" for the worker
	// group (allreduce jobs), PSGroup for the parameter-server rule's.
	Group string `json:"group,omitempty"`
	From  int    `json:"from"`
	To    int    `json:"to"`
	Node  string `json:"node,omitempty"`
	// Rank and MilliCPU are a Migrate's: the PS's rank and the CPU its new
	// node asks for.
	Rank     int       `json:"rank,omitempty"`
	MilliCPU int64     `json:"milli_cpu,omitempty"`
	Reason   Reason    `json:"reason"`
	Message  string    `json:"message"`
	Gain     float64   `json:"gain"`
	At       time.Time `json:"at"`
}

// Changes reports whether d asks for a change (anything but Hold).
func (d Decision) Changes() bool { return d.Action != Hold && d.Action != "" }
