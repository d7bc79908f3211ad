"""The compile pipeline, in order (each pass is one module under passes/; docs/passes.md).

Every pass not in REQUIRED can be switched off with the fusion_switch_file option
(pass_switches.py), so a pass added to PASSES is switchable as it is.
"""
from graph_engine.compiler import serialize
from graph_engine.compiler.pass_manager import PassManager
from graph_engine.compiler.passes import (eliminate_dead_code, eliminate_identities,
                                          fold_constants, infer_shapes, lower, plan_memory,
                                          precision)
from graph_engine.compiler.passes import eliminate_common_subexpressions, simplify_algebra
from graph_engine.compiler.passes.fusion import (activation_grad_bias_add_grad, contraction_epilogue,
                                                 fold_batch_norm, gelu, layer_norm, softmax)
from graph_engine.compiler.passes import layout
from graph_engine.compiler.passes import fuse_elementwise

PASSES = [
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


def pipeline():
    return PassManager(PASSES, REQUIRED)
