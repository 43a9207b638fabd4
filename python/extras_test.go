package python

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roverml/rover/internal/ckpt"
)

// The tests in this file check the non-tensor part of a checkpoint (the
// __rover_extra__ entry, python/rover/_extras.py): typed JSON that
// round-trips a real training state and that load() refuses, without
// running anything, when it is not what save() writes.

// TestExtrasRoundTrip saves a real training state (a model with batch
// norm, AdamW with amsgrad, SGD with Nesterov momentum, two LR schedulers,
// and the odd values a state can hold) to a directory without the agent,
// and checks that the state loaded from memory and from storage equals it,
// with the same types, key types and key order, that the model, the
// optimizers and the schedulers accept it, and that an optimizer step from
// the restored state is the step from the original. In Go, the extras entry
// is JSON.
func TestExtrasRoundTrip(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "ckpt")
	script := `
import collections, math, struct, sys, torch
sys.path.insert(0, ".")
from rover.checkpoint import Checkpointer

def build():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 1))
    adam = torch.optim.AdamW(model.parameters(), lr=0.01, betas=(0.8, 0.99), amsgrad=True)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    return model, adam, sgd, torch.optim.lr_scheduler.StepLR(adam, step_size=2, gamma=0.5), \
        torch.optim.lr_scheduler.ReduceLROnPlateau(sgd)

model, adam, sgd, sched, plateau = build()
def train_step(model, opt, seed):
    opt.zero_grad()
    model(torch.randn(8, 4, generator=torch.Generator().manual_seed(seed))).pow(2).mean().backward()
    opt.step()
for i in range(3):
    train_step(model, adam, 2 * i)
    train_step(model, sgd, 2 * i + 1)
    sched.step()
    plateau.step(1.0)

odd = {
    "big": 2**200, "neg_big": -2**64, "int64": [2**63 - 1, -2**63], "zero": 0,
    "floats": [0.1, -0.0, 0.0, float("inf"), float("-inf"), float("nan"), 5e-324, 1.7976931348623157e308, 1e16],
    "s": "na\u00efve \u2603 \ud800 \"quoted\" [{", "b": b"\x00\x80\xff", "empty": [b"", "", [], (), {}],
    "none": None, "bools": [True, False],
    "keys": {1: "int", -2**70: "bigint", 2.5: "float", float("inf"): "inf", False: "bool", None: "none",
             "$s": "dollar", "": "empty"},
    "nested": [(1, (2, [3, {"t": torch.arange(3)}])), collections.OrderedDict([("b", 1), ("a", (2,))])],
    "dtype": torch.bfloat16, "size": torch.Size([2, 3]), "order": {"z": 1, "a": 2, "m": 3},
    "tensors": {"a.b": torch.ones(1), "a": {"b": torch.zeros(1)}, "half": torch.ones(2, dtype=torch.half),
                "scalar": torch.tensor(7), "empty": torch.empty(0, 3)},
}
state = {"model": model.state_dict(), "adam": adam.state_dict(), "sgd": sgd.state_dict(),
         "sched": sched.state_dict(), "plateau": plateau.state_dict(), "odd": odd, "step": 3}
assert isinstance(state["adam"]["state"][0]["step"], torch.Tensor) or torch.__version__ < "1.12"
assert state["plateau"]["mode_worse"] == math.inf and state["adam"]["param_groups"][0]["betas"] == (0.8, 0.99)

def same(a, b, path="state"):
    assert type(a) is type(b), (path, type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), (path, a, b)
    elif isinstance(a, float):
        assert struct.pack("<d", a) == struct.pack("<d", b), (path, a, b)
    elif isinstance(a, dict):
        assert [(type(k), repr(k)) for k in a] == [(type(k), repr(k)) for k in b], (path, list(a), list(b))
        for (k, x), y in zip(a.items(), b.values()):
            same(x, y, f"{path}.{k}")
        same(getattr(a, "_metadata", None), getattr(b, "_metadata", None), path + "._metadata")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), (path, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}.{i}")
    else:
        assert a == b, (path, a, b)

c = Checkpointer(sys.argv[1])
c.save(3, state, persist=True)
step, from_memory = c.load()
assert step == 3 and c.restored_from == "memory"
same(state, from_memory)
fresh = Checkpointer(sys.argv[1])  # another process: from storage
step, restored = fresh.load()
assert step == 3 and fresh.restored_from == "storage"
same(state, restored)
assert restored["odd"]["tensors"]["a.b"].tolist() == [1.0] and restored["odd"]["tensors"]["a"]["b"].tolist() == [0.0]

model2, adam2, sgd2, sched2, plateau2 = build()
model2.load_state_dict(restored["model"])  # strict
adam2.load_state_dict(restored["adam"])
sgd2.load_state_dict(restored["sgd"])
sched2.load_state_dict(restored["sched"])
plateau2.load_state_dict(restored["plateau"])
same(adam.state_dict(), adam2.state_dict())
same(sched.state_dict(), sched2.state_dict())
for (m, opt), (m2, opt2) in [((model, adam), (model2, adam2)), ((model, sgd), (model2, sgd2))]:
    train_step(m, opt, 99)
    train_step(m2, opt2, 99)
    same(m.state_dict(), m2.state_dict())
print("ok")
`
	if out := runPython(t, script, nil, dir); string(out) != "ok\n" {
		t.Fatalf("python: %s", out)
	}

	ctx := context.Background()
	b, err := ckpt.OpenBucket(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := ckpt.LoadLatest(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	tensors, _, err := ckpt.LoadRank(ctx, b, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	rest, extra := ckpt.SplitExtra(tensors)
	var doc struct {
		Version *int            `json:"rover_extras"`
		State   json.RawMessage `json:"state"`
	}
	if err := json.Unmarshal(extra, &doc); err != nil || doc.Version == nil || *doc.Version != 1 {
		t.Fatalf("extras are not a version 1 JSON document (%v): %.200s", err, extra)
	}
	names := map[string]bool{}
	for _, x := range rest {
		names[x.Name] = true
	}
	for _, name := range []string{"state.model.0.weight", "state.adam.state.0.exp_avg", "state.adam.state.0.step",
		"state.sgd.state.1.momentum_buffer", "state.odd.tensors.a.b", "state.odd.tensors.a.b~1"} {
		if !names[name] {
			t.Errorf("no tensor %q in the file (tensors %v)", name, names)
		}
	}
}

// TestExtrasRefusedSafely commits checkpoints that are valid but for their
// extras (manifest, sizes and CRC32Cs match): a pickle that creates a file
// when unpickled, as an older Rover's or an attacker's, and JSON documents
// that save() never writes. load() raises ExtrasError saying what is wrong,
// and nothing in the extras runs: the pickle's file is not created.
func TestExtrasRefusedSafely(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	template, marker, probe := filepath.Join(tmp, "template"), filepath.Join(tmp, "pwned"), filepath.Join(tmp, "probe")
	out := runPython(t, `
import base64, json, os, pickle, sys, torch
sys.path.insert(0, ".")
from rover.checkpoint import Checkpointer
template, marker, probe = sys.argv[1:4]
Checkpointer(template).save(1, {"w": torch.ones(2), "n": 1}, persist=True)

class Evil:
    def __init__(self, path):
        self.path = path
    def __reduce__(self):
        return (open, (self.path, "w"))  # unpickling creates the file

def payload(path, protocol=pickle.HIGHEST_PROTOCOL):
    return pickle.dumps({"w": None, "evil": Evil(path)}, protocol=protocol)
pickle.loads(payload(probe))  # the payload is live
assert os.path.exists(probe)
print(json.dumps([base64.b64encode(payload(marker)).decode(), base64.b64encode(payload(marker, 0)).decode()]))
`, nil, template, marker, probe)
	var payloads [2]string
	if err := json.Unmarshal(out, &payloads); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if _, err := os.Stat(probe); err != nil {
		t.Fatalf("the pickle payload does not create its file when unpickled, so the test proves nothing: %v", err)
	}
	pickled, _ := base64.StdEncoding.DecodeString(payloads[0])
	pickled0, _ := base64.StdEncoding.DecodeString(payloads[1])

	ctx := context.Background()
	tb, err := ckpt.OpenBucket(ctx, template)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	m, err := ckpt.LoadLatest(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	tensors, _, err := ckpt.LoadRank(ctx, tb, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	rest, _ := ckpt.SplitExtra(tensors)

	doc := func(state string) string { return `{"rover_extras":1,"state":` + state + `}` }
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	cases := []struct {
		name, extras, want string
	}{
		{"pickle of an older Rover", string(pickled), "written by an older Rover with pickle"},
		{"pickle protocol 0", string(pickled0), "not valid JSON"},
		{"truncated JSON", doc(`{"w":{"$tensor":"state.w"}`)[:30], "not valid JSON"},
		{"not UTF-8", "\xff\xfe{}", "not valid JSON"},
		{"NaN literal", doc(`NaN`), "NaN is not JSON"},
		{"duplicate key", doc(`{"a":1,"a":2}`), "duplicate key 'a'"},
		{"no version", `{"state":null}`, "not a Rover extras document"},
		{"newer version", `{"rover_extras":2,"state":null}`, "extras format version 2"},
		{"unknown field", `{"rover_extras":1,"state":null,"code":"x"}`, "want rover_extras and state"},
		{"unknown tag", doc(`{"w":{"$tensor":"state.w"},"x":[{"$pickle":"gASV"}]}`), "state.x.0: unknown tag '$pickle'"},
		{"missing tensor", doc(`{"w":{"$tensor":"state.nope"}}`), "state.w: refers to tensor 'state.nope'"},
		{"tag beside a key", doc(`{"$tuple":[],"x":1}`), "state: the tag '$tuple' has other keys"},
		{"bad $int", doc(`{"$int":"1e9"}`), "$int takes a hex string"},
		{"bad $float", doc(`{"$float":"1.5"}`), "$float takes"},
		{"bad $bytes", doc(`{"$bytes":"@@"}`), "$bytes is not base64"},
		{"bad $dtype", doc(`{"$dtype":"os.system"}`), "$dtype takes the name of a torch dtype"},
		{"list as a key", doc(`{"$dict":[[[1],2]]}`), "key must be None, bool, int, float or str"},
		{"pairs not pairs", doc(`{"$od":[[1,2,3]]}`), "a list of [key, value] pairs"},
		{"JSON nested 100000 deep", doc(deep(100000)), "nests deeper than 100 levels"},
		{"values nested 150 deep", doc(deep(150)), "nested deeper than 100 levels"},
	}
	var dirs []string
	for _, tc := range cases {
		dir := filepath.Join(tmp, "case", strings.ReplaceAll(tc.name, " ", "-"))
		b, err := ckpt.OpenBucket(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		files := map[int][]ckpt.Tensor{0: append(append([]ckpt.Tensor(nil), rest...), ckpt.Extra([]byte(tc.extras)))}
		goCheckpoint(t, b, 1, 1, ckpt.Sharded, files, true)
		b.Close()
		dirs = append(dirs, dir)
	}
	script := `
import json, sys
sys.path.insert(0, ".")
from rover.checkpoint import Checkpointer, ExtrasError
out = []
for d in sys.argv[1:]:
    try:
        Checkpointer(d).load()
        out.append("loaded")
    except ExtrasError as e:
        out.append(str(e))
print(json.dumps(out))
`
	var got []string
	if err := json.Unmarshal(runPython(t, script, nil, dirs...), &got); err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		if !strings.Contains(got[i], tc.want) || !strings.HasPrefix(got[i], "cannot load step 1 of this checkpoint: ") {
			t.Errorf("%s: load() = %q, want an ExtrasError saying %q", tc.name, got[i], tc.want)
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("loading the pickled extras ran its code: %s exists (%v)", marker, err)
	}
}

// TestExtrasSaveRefusesOtherTypes checks that save() of a value outside the
// closed set raises TypeError naming its path and type, and what can be
// saved, before anything is written; and that subclasses of the supported
// types are saved as their base type.
func TestExtrasSaveRefusesOtherTypes(t *testing.T) {
	t.Parallel()
	script := `
import collections, enum, sys, numpy, torch
sys.path.insert(0, ".")
from rover.checkpoint import Checkpointer

class Foo:
    pass
def meta(m):
    d = collections.OrderedDict(w=torch.ones(1))
    d._metadata = m
    return d
cycle = []
cycle.append(cycle)
c = Checkpointer(sys.argv[1])
c.save(1, {"w": torch.ones(1)}, persist=True)
for state, want in [
        ({"optim": {"foo": Foo()}}, "state.optim.foo: cannot checkpoint a __main__.Foo:"),
        ({"s": [1, {2, 3}]}, "state.s.1: cannot checkpoint a set:"),
        ({"b": (bytearray(b"x"),)}, "state.b.0: cannot checkpoint a bytearray:"),
        ({"k": {(1, 2): 3}}, "state.k.(1, 2): cannot checkpoint a dict key of type tuple:"),
        ({"f": len}, "state.f: cannot checkpoint a builtin_function_or_method:"),
        ({"np": numpy.zeros(2)}, "state.np: cannot checkpoint a numpy.ndarray (convert numpy values with torch.from_numpy"),
        ({"m": meta(Foo())}, "state.m._metadata: cannot checkpoint a __main__.Foo:"),
        ({"c": cycle}, "nests deeper than 100 levels (or contains itself)")]:
    try:
        c.save(2, state, persist=True)
        raise AssertionError(f"saved {state}")
    except (TypeError, ValueError) as e:
        assert want in str(e), (want, str(e))
        assert isinstance(e, ValueError if state.get("c") else TypeError), e
        assert isinstance(e, ValueError) or "a checkpoint holds tensors, None, bool, int, float, str" in str(e), e
assert c.wait() == 1 and c.latest_step() == 1 and Checkpointer(sys.argv[1]).latest_step() == 1

class Color(enum.IntEnum):
    RED = 1
class Name(str, enum.Enum):
    ADAM = "adam"
Point = collections.namedtuple("Point", "x y")
c.save(2, {"color": Color.RED, "name": Name.ADAM, "f": numpy.float64(0.5), "p": Point(1, 2),
           "keys": {Color.RED: 1, Name.ADAM: 2}})
got = c.load()[1]
want = {"color": 1, "name": "adam", "f": 0.5, "p": (1, 2), "keys": {1: 1, "adam": 2}}
assert got == want and [type(v) for v in got.values()] == [int, str, float, tuple, dict], got
assert [type(k) for k in got["keys"]] == [int, str], got
print("ok")
`
	if out := runPython(t, script, nil, t.TempDir()); string(out) != "ok\n" {
		t.Errorf("python: %s", out)
	}
}

// TestExtrasDecoderFuzz round-trips random values through the extras
// encoding, then decodes random mutations of their documents: each either
// decodes or raises ExtrasError; no other exception (a KeyError, a
// RecursionError) escapes. The seed is fixed, so a failure reproduces.
func TestExtrasDecoderFuzz(t *testing.T) {
	t.Parallel()
	script := `
import collections, random, sys, torch
sys.path.insert(0, ".")
from rover import _extras

rng = random.Random(1)
def value(depth=0):
    k = rng.randrange(14 if depth < 4 else 8)
    return [None, True, rng.randrange(-2**70, 2**70), rng.choice([0.5, -0.0, float("inf"), 1e-300]),
            "s$[\"{" * rng.randrange(3), bytes(rng.randrange(256) for _ in range(rng.randrange(5))),
            torch.float16, torch.Size([rng.randrange(5)]),
            lambda: [build(depth + 1) for _ in range(rng.randrange(4))],
            lambda: tuple(build(depth + 1) for _ in range(rng.randrange(4))),
            lambda: {rng.choice(["a", "$b", 3, None, 2.5, "c"]): build(depth + 1) for _ in range(rng.randrange(4))},
            lambda: collections.OrderedDict((str(i), build(depth + 1)) for i in range(rng.randrange(3))),
            lambda: {"t": torch.arange(rng.randrange(4))},
            lambda: {"x": build(depth + 1)}][k]
def build(depth=0):
    v = value(depth)
    return v() if callable(v) and not isinstance(v, torch.dtype) else v

decoded = failed = 0
for i in range(300):
    v = {"v": build()}
    raw, tensors = _extras.encode(v, torch)
    tensors = dict(tensors)
    back = _extras.decode(raw, tensors, torch)
    raw2, _ = _extras.encode(back, torch)
    assert raw2 == raw, (raw, raw2)
    for _ in range(20):
        b = bytearray(raw)
        for _ in range(rng.randrange(1, 4)):
            op, at = rng.randrange(3), rng.randrange(len(b))
            if op == 0:
                b[at] = rng.choice(b'{}[]",:$0-9.e\\ntx\x80')
            elif op == 1:
                del b[at]
            else:
                b[at:at] = bytes([rng.choice(b'{}[]",:$1')])
        try:
            _extras.decode(bytes(b), tensors, torch)
            decoded += 1
        except _extras.ExtrasError:
            failed += 1
assert decoded > 100 and failed > 1000, (decoded, failed)
print("ok")
`
	if out := runPython(t, script, nil); string(out) != "ok\n" {
		t.Errorf("python: %s", out)
	}
}
