"""What a compile pipeline (pipeline.py) is made of: the Compilation its passes share, the rules
that switch optional passes off, and the per-pass log.

A pass is a function `run(c: Compilation)` in its own module under passes/; it reads and
updates the state below and may return a dict of statistics ({"folded": 3}). Errors are
CompileErrors naming the node; anything else escaping a pass is a compiler bug and is reported
with the pass name.

Per pass the pipeline's PassManager records in `c.log` (the compiled model's metadata "passes"):
    {"pass": name, "nodes_before": n, "nodes": n after, "ms": wall time, "stats": {...}}
or {"pass": name, "skipped": "switched off by fusion_switch_file"} (or by the option that
switched it off).

The switch rules below take the names of the passes they switch as arguments: the pipeline
passes its own (pipeline.load_switches); the file format is described in pass_switches.py.
"""
import dataclasses

from graph_engine.compiler.options import read_json


@dataclasses.dataclass
class Compilation:
    name: str
    graph: object                                   # graph.Graph, _Arg/_Retval delimited
    input_shapes: list                              # concrete shape per _Arg index
    options: dict = dataclasses.field(default_factory=dict)
    source: str = "cluster"                         # "cluster" or "eager op"
    # output index -> input index: results the caller would like to write over that input (a
    # variable the cluster updates in place); plan.in_place says which it may
    in_place_requests: dict = dataclasses.field(default_factory=dict)
    program: object = None                          # passes.lower.Program
    plan: object = None                             # passes.plan_memory.Plan
    model: object = None                            # model_format.Model
    log: list = dataclasses.field(default_factory=list)   # per pass, see the module doc


ALL = "ALL"
VALUES = ("on", "off")
ASCEND_GROUPS = ("GraphFusion", "UBFusion")
# Boolean compile options that switch passes off when false (and leave them to the switches
# when true): option -> passes. A pass runs only if the switches and every such option let it.
OPTION_SWITCHES = {"enable_graph_kernel": ("fuse_elementwise",)}


def _flatten(where, obj):
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: the top level must be a JSON object, got "
                         f"{type(obj).__name__}")
    if "Switch" not in obj:
        return obj
    flat = {k: v for k, v in obj.items() if k != "Switch"}
    groups = obj["Switch"]
    if not isinstance(groups, dict) or not all(isinstance(g, dict) for g in groups.values()):
        raise ValueError(f"{where}: \"Switch\" must map {' / '.join(ASCEND_GROUPS)} to objects")
    for group in groups.values():
        flat.update(group)
    return flat


def parse_switches(value, switchable, required):
    """The normalised switches {name: "on"|"off"} from a path, JSON text or dict, whose names
    must be in `switchable` (`required`: passes that cannot be switched off); ValueError naming
    the source, the problem and the allowed names/values."""
    where, obj = read_json(value)
    result = {}
    for name, state in _flatten(where, obj).items():
        if name != ALL and name not in switchable:
            why = "is required and cannot be switched off" if name in required \
                else "is not a pass"
            raise ValueError(f"{where}: {name!r} {why}; switchable names: "
                             f"{', '.join([ALL] + sorted(switchable))}")
        if not isinstance(state, str) or state.strip().lower() not in VALUES:
            raise ValueError(f"{where}: value {state!r} for {name!r} is not allowed; values: "
                             f"{', '.join(VALUES)}")
        result[name] = state.strip().lower()
    return dict(sorted(result.items()))


def enabled(name, switches):
    """Whether optional pass `name` runs under the normalised `switches`."""
    return switches.get(name, switches.get(ALL, "on")) == "on"


def switched_off_by(name, switches, options):
    """What turns optional pass `name` off: "fusion_switch_file", the name of a false option
    of OPTION_SWITCHES in the compile `options`, or None when it runs."""
    if not enabled(name, switches):
        return "fusion_switch_file"
    for option, passes in OPTION_SWITCHES.items():
        if name in passes and options.get(option) is False:
            return option
    return None


def format_log(log):
    """A compile's pass log (metadata "passes") as a table, one line per pass."""
    lines = [f"{'pass':<40} {'nodes':>13} {'ms':>9}  stats"]
    for p in log:
        if "skipped" in p:
            lines.append(f"{p['pass']:<40} {'':>13} {'':>9}  ({p['skipped']})")
            continue
        stats = ", ".join(f"{k}={v}" for k, v in p.get("stats", {}).items())
        nodes = f"{p.get('nodes_before', '?')} -> {p['nodes']}"
        lines.append(f"{p['pass']:<40} {nodes:>13} {p['ms']:>9.3f}  {stats}")
    return "\n".join(lines)
