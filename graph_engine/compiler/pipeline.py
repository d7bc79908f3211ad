"""The compile pipeline, in order (each pass is one module under passes/)."""
from graph_engine.compiler import serialize
from graph_engine.compiler.pass_manager import PassManager
from graph_engine.compiler.passes import (eliminate_dead_code, eliminate_identities,
                                          fold_constants, infer_shapes, lower, plan_memory,
                                          precision)

PASSES = [
    ("infer_shapes", infer_shapes.run),            # static shapes + compile-time values
    ("fold_constants", fold_constants.run),        # known values become Const nodes
    ("eliminate_identities", eliminate_identities.run),
    ("eliminate_dead_code", eliminate_dead_code.run),
    # -- canonicalization: CSE, algebraic simplification --
    ("precision", precision.run),                  # precision mode: Casts around ops
    ("fold_constants", fold_constants.run),        # casts of constants
    ("eliminate_dead_code", eliminate_dead_code.run),
    # -- pattern fusion: contractions + epilogues, batch-norm folding, Gelu/LayerNorm/Softmax --
    # -- elementwise chain fusion --
    # -- layout: NC1HWC0 / FRACTAL_Z and TransData --
    ("lower", lower.run),                          # nodes -> kernel sequence
    ("plan_memory", plan_memory.run),              # liveness + arena offsets
    ("serialize", serialize.run),                  # -> model_format.Model
]


def pipeline():
    return PassManager(PASSES)
