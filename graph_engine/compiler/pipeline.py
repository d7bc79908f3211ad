"""The compile pipeline: its passes in order (each one module under passes/; docs/passes.md)
and the PassManager that runs them over a Compilation (pass_manager.py).

Every pass not in REQUIRED can be switched off with the fusion_switch_file option
(pass_switches.py), so a pass added to PASSES is switchable as it is. The PassManager reads
the compile options `fusion_switch_file` (checked against this pipeline's passes),
`enable_graph_kernel` and the other pass_manager.OPTION_SWITCHES, and `dump_graph_path` (the
graph as text and Graphviz dot before the first pass and after each one, see dump.py).
"""
import itertools
import operator
import time

from graph_engine.compiler import dump, serialize
from graph_engine.compiler.pass_manager import Compilation, parse_switches, switched_off_by
from graph_engine.ops.errors import CompileError
from graph_engine.compiler.passes import (eliminate_dead_code, eliminate_identities,
                                          fold_constants, infer_shapes, lower, plan_memory,
                                          precision)
from graph_engine.compiler.passes import eliminate_common_subexpressions, simplify_algebra
from graph_engine.compiler.passes import order_in_place_writes
from graph_engine.compiler.passes.fusion import (activation_grad_bias_add_grad, batch_norm_training,
                                                 contraction_epilogue, fold_batch_norm, gelu,
                                                 layer_norm, softmax)
from graph_engine.compiler.passes import layout
from graph_engine.compiler.passes import fuse_elementwise

PASSES = [
    # TF's graphs repeat constants (an optimizer's per-variable scalars, reduction axes ...): the
    # partitioner copies each distinct one into a cluster once (partition/rewrite.py), so the
    # first CSE comes after folding, where it also merges what folding made equal.
    ("infer_shapes", infer_shapes.run),            # static shapes + compile-time values
    ("fold_constants", fold_constants.run),        # known values become Const nodes
    ("eliminate_identities", eliminate_identities.run),
    ("eliminate_dead_code", eliminate_dead_code.run),
    # -- canonicalization: CSE, algebraic simplification --
    ("eliminate_common_subexpressions", eliminate_common_subexpressions.run),
    ("simplify_algebra", simplify_algebra.run),    # exact rewrites: x*1, Neg(Neg x), ...
    ("eliminate_common_subexpressions", eliminate_common_subexpressions.run),  # what it exposed
    ("eliminate_dead_code", eliminate_dead_code.run),
    ("precision", precision.run),                  # precision mode: Casts around ops
    ("fold_constants", fold_constants.run),        # casts of constants
    ("eliminate_dead_code", eliminate_dead_code.run),
    # -- pattern fusion: contractions + epilogues, batch-norm folding, Gelu/LayerNorm/Softmax --
    ("fuse_gelu", gelu.run),                       # Gelu subgraphs -> NpuGelu
    ("fuse_layer_norm", layer_norm.run),           # LayerNorm subgraphs -> NpuLayerNorm
    ("fuse_batch_norm_training", batch_norm_training.run),  # BN moments/grad sums, no Tiles
    ("fuse_softmax", softmax.run),                 # exp(x - max) / sum -> Softmax
    ("fold_batch_norm", fold_batch_norm.run),      # inference BN into conv/matmul weights
    ("fuse_contraction_epilogue", contraction_epilogue.run),   # conv/matmul + bias + act
    ("fuse_activation_grad_bias_add_grad", activation_grad_bias_add_grad.run),  # training
    # -- elementwise chain fusion --
    ("fuse_elementwise", fuse_elementwise.run),      # chains -> one NpuElementwise kernel
    # -- layout: NC1HWC0 / FRACTAL_Z and TransData --
    ("assign_formats", layout.assign_formats.run),          # which nodes run NC1HWC0
    ("insert_transdata", layout.insert_transdata.run),      # conversions at format boundaries
    ("absorb_transposes", layout.absorb_transposes.run),    # NCHW Transposes into TransData
    ("sink_transdata", layout.sink_transdata.run),          # through elementwise ops
    ("cancel_transdata", layout.cancel_transdata.run),      # A->B->A, duplicates
    ("fold_transdata", layout.fold_transdata.run),          # constant filters converted now
    ("eliminate_dead_code", eliminate_dead_code.run),
    ("lower", lower.run),                          # nodes -> kernel sequence
    ("order_in_place_writes", order_in_place_writes.run),   # updates after the last read
    ("plan_memory", plan_memory.run),              # liveness + arena offsets
    ("serialize", serialize.run),                  # -> model_format.Model
]

# Passes every compile needs: the runtime has no kernels for Const/Identity/Shape/NoOp and
# lowering turns every node left into a kernel, so folding, identity and dead-code elimination
# belong here too, not only shape inference, precision and the back end.
REQUIRED = ("infer_shapes", "fold_constants", "eliminate_identities", "eliminate_dead_code",
            "precision", "lower", "plan_memory", "serialize")


def switchable():
    """Names of the passes the fusion_switch_file option can turn off."""
    return sorted({name for name, _ in PASSES} - set(REQUIRED))


def load_switches(value):
    """The normalised switches of a fusion_switch_file value (path, JSON text or dict), checked
    against the passes of this pipeline; ValueError if malformed (pass_manager.parse_switches)."""
    return parse_switches(value, switchable(), REQUIRED)


def switches_of(options):
    """The normalised pass switches of compile options (CompileError if malformed)."""
    value = options.get("fusion_switch_file")
    if not value:
        return {}
    try:
        return load_switches(value)
    except ValueError as e:
        raise CompileError(f"compile option fusion_switch_file: {e}") from None


_node_of, _inputs_of = operator.attrgetter("node"), operator.attrgetter("inputs")


def _check_graph(c, name):
    """A pass must not leave inputs pointing at removed nodes: catch it where it happens (after
    each pass that added or removed nodes; one that did neither cannot orphan an input)."""
    nodes = c.graph.nodes
    live = set(nodes.values())
    # One set operation per pass, over iterators that run in C.
    if live.issuperset(map(_node_of, itertools.chain.from_iterable(map(_inputs_of, live)))):
        return
    for n in nodes.values():
        for v in n.inputs:
            if v.node not in live:
                raise CompileError(f"internal error: compiler pass {name!r} left input {v.ref} "
                                   f"of node {n.name!r} pointing at a removed node")


class PassManager:
    """Runs named passes in order, skipping the optional ones the compile options switch off,
    and logs each (see pass_manager.py)."""

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
                switched_off_by(name, switches, c.options)
            if off:
                c.log.append({"pass": name, "skipped": f"switched off by {off}"})
                continue
            graph, edits = c.graph, c.graph.edits
            before, start = len(graph), time.perf_counter()
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
            if c.graph is not graph or c.graph.edits != edits:
                _check_graph(c, name)
            c.log.append({"pass": name, "nodes_before": before, "nodes": len(c.graph),
                          "ms": round(1000 * (time.perf_counter() - start), 3),
                          "stats": dict(stats or {})})
            if dumper:
                dumper.write(name, c.graph)
        return c


def pipeline():
    return PassManager(PASSES, REQUIRED)
