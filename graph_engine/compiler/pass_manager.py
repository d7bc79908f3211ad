"""The compile pipeline: named passes over one Compilation, run in order.

A pass is a function `run(c: Compilation)` in its own module under passes/; it reads and
updates the state below and may return a dict of statistics ({"folded": 3}). Errors are
CompileErrors naming the node; anything else escaping a pass is a compiler bug and is reported
with the pass name.

Per pass the manager records in `c.log` (the compiled model's metadata "passes"):
    {"pass": name, "nodes_before": n, "nodes": n after, "ms": wall time, "stats": {...}}
or {"pass": name, "skipped": "switched off by fusion_switch_file"} (or by the option that
switched it off). Compile options it reads: `fusion_switch_file` (normalised switches, see
pass_switches.py), the options of pass_switches.OPTION_SWITCHES (`enable_graph_kernel`) and
`dump_graph_path` (the graph as text and Graphviz dot before the first pass and after each one,
see dump.py).
"""
import dataclasses
import time

from graph_engine.compiler import dump, pass_switches
from graph_engine.ops.errors import CompileError


@dataclasses.dataclass
class Compilation:
    name: str
    graph: object                                   # graph.Graph, _Arg/_Retval delimited
    input_shapes: list                              # concrete shape per _Arg index
    options: dict = dataclasses.field(default_factory=dict)
    source: str = "cluster"                         # "cluster" or "eager op"
    program: object = None                          # passes.lower.Program
    plan: object = None                             # passes.plan_memory.Plan
    model: object = None                            # model_format.Model
    log: list = dataclasses.field(default_factory=list)   # per pass, see the module doc


def switches_of(options):
    """The normalised pass switches of compile options (CompileError if malformed)."""
    value = options.get("fusion_switch_file")
    if not value:
        return {}
    try:
        return pass_switches.load(value)
    except ValueError as e:
        raise CompileError(f"compile option fusion_switch_file: {e}") from None


def _check_graph(c, name):
    """A pass must not leave inputs pointing at removed nodes: catch it where it happens."""
    nodes = c.graph.nodes
    for n in nodes.values():
        for v in n.inputs:
            if nodes.get(v.node.name) is not v.node:
                raise CompileError(f"internal error: compiler pass {name!r} left input {v.ref} "
                                   f"of node {n.name!r} pointing at a removed node")


class PassManager:
    def __init__(self, passes, required=()):
        self.passes = list(passes)                  # [(name, run)]
        self.required = frozenset(required)         # names the switches cannot turn off

    def run(self, c: Compilation):
        switches = switches_of(c.options)
        dumper = dump.Dumper.for_options(c.options, c.name)
        if dumper:
            dumper.write("input", c.graph)
        for name, run in self.passes:
            off = None if name in self.required else \
                pass_switches.switched_off_by(name, switches, c.options)
            if off:
                c.log.append({"pass": name, "skipped": f"switched off by {off}"})
                continue
            before, start = len(c.graph), time.perf_counter()
            try:
                stats = run(c)
            except CompileError:
                raise
            except Exception as e:                  # a bug in a pass: say where
                raise CompileError(f"internal error in compiler pass {name!r} while compiling "
                                   f"{c.name!r}: {type(e).__name__}: {e}") from e
            if stats is not None and not isinstance(stats, dict):
                raise CompileError(f"internal error: compiler pass {name!r} returned "
                                   f"{type(stats).__name__}, expected a statistics dict or None")
            _check_graph(c, name)
            c.log.append({"pass": name, "nodes_before": before, "nodes": len(c.graph),
                          "ms": round(1000 * (time.perf_counter() - start), 3),
                          "stats": dict(stats or {})})
            if dumper:
                dumper.write(name, c.graph)
        return c


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
