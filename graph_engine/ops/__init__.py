"""GE op registry: what the NPU implements, one small class per TF op (see base.py).

    from graph_engine import ops
    ops.get("MatMul")          # the op, or None
    ops.registered()           # {name: op}, the TF ops
    ops.internal()             # {name: op}, GE-internal kernels made by passes (fusion, layout)
    ops.has("Relu", "fusible") # an op's trait (base.Op lists them)
    ops.having("fusible")      # the ops with a trait

supported_ops.json in this folder is generated from it (python -m graph_engine.compiler.supported_ops)
and read by the TF plugin to register NPU kernels.
"""
from graph_engine.ops import (array, array_extra, conv, conv3d, einsum, elementwise, extra_math, fft,  # noqa: F401
                              fused, fused_elementwise, identity, image, layout, linalg, matmul, mirror_pad,
                              nn, nn_extra, norm, pool, pool3d, random, reduction, resize, scan, scatter, segment,
                              shape, sparse, special)
from graph_engine.ops.base import (ALL, FLOAT, INDEX, INT, NUMBER, Op, evaluate, get, has, having,
                                   internal, registered)

__all__ = ["ALL", "FLOAT", "INDEX", "INT", "NUMBER", "Op", "evaluate", "get", "has", "having",
           "internal", "registered"]
