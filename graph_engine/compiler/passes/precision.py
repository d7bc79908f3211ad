"""Precision: applies the precision mode (options["precision"], the canonical Ascend names) by
rewriting float32 ops to float16/bfloat16 with explicit Casts, so every kernel stays a plain
TF-typed op and the reference semantics (compute in float32, round on store) hold per kernel.

  must_keep_origin_dtype       nothing changes (also when no option is set)
  cube_fp16in_fp32out          matrix ops read float32 inputs rounded to float16 and produce
                               float32 (Cast f32->f16->f32 before each input): the cube unit's
                               fp16 operands with fp32 accumulation
  allow_fp32_to_fp16 / _bf16   matrix ops run in float16 / bfloat16, all other ops in float32
  force_fp16                   every float32 op with a float16 kernel runs in float16
  allow_mix_precision_fp16 / _bf16
                               white-list ops reduce, black-list ops keep float32, gray-list
                               ops reduce when all their float inputs are already reduced;
                               options["modify_mixlist"] edits the lists

Reduced ops read narrow values and their consumers read a Cast back to float32; a Cast that
would widen and narrow again is skipped (exact), so chains of reduced ops stay narrow, and
cancel_casts removes what remains of exact Cast chains (also the user's own).

Nodes with the attr `_keep_dtype` (set by npu_device.keep_dtype_scope()) keep their dtype in
every mode. The lists live in graph_engine/compiler/mixlist.py (table in docs/precision.md).
"""
from graph_engine import ops
from graph_engine.compiler import attrs as attr_util
from graph_engine.ops import dtypes as dt
from graph_engine.ops.errors import CompileError
from graph_engine.compiler.mixlist import CUBE, mix_lists
from graph_engine.compiler.node import Node
from graph_engine.compiler.passes import cancel_casts, infer_shapes
from graph_engine.compiler.signature import signature

KEEP_DTYPE_ATTR = "_keep_dtype"

MODES = {
    "must_keep_origin_dtype": None,
    "cube_fp16in_fp32out": None,
    "allow_fp32_to_fp16": dt.DT_HALF,
    "allow_fp32_to_bf16": dt.DT_BFLOAT16,
    "force_fp16": dt.DT_HALF,
    "allow_mix_precision_fp16": dt.DT_HALF,
    "allow_mix_precision_bf16": dt.DT_BFLOAT16,
}


class Rewriter:
    def __init__(self, g, narrow):
        self.g, self.narrow = g, narrow
        self.users = g.data_consumers()
        self.casts = {}            # (Value, dtype) -> Cast output
        self.widened = {}          # a Cast(narrow -> float32) output -> its narrow input

    def cast(self, v, dtype):
        if (v, dtype) not in self.casts:
            node = self.g.add(Node(self.g.unique_name(f"{v.node.name}/to_{dt.name(dtype)}"),
                                   "Cast", inputs=[v], output_dtypes=[dtype],
                                   attrs={"SrcT": attr_util.make(type=v.dtype),
                                          "DstT": attr_util.make(type=dtype),
                                          "Truncate": attr_util.make(False)}))
            self.casts[(v, dtype)] = node.outputs[0]
        return self.casts[(v, dtype)]

    def narrowed(self, v):
        """v (float32) as a narrow value, skipping a widening Cast this pass made."""
        source = self.widened.get(v)
        return source if source is not None and source.dtype == self.narrow \
            else self.cast(v, self.narrow)

    def float_attrs(self, node):
        op = ops.get(node.op)
        if op is None or node.op in ("Cast", "Bitcast") or node.attr(KEEP_DTYPE_ATTR):
            return []
        return [a for a, allowed in op.type_attrs.items()
                if node.attr(a) == dt.DT_FLOAT and self.narrow in allowed]

    def reducible(self, node):
        return bool(self.float_attrs(node))

    def reduce(self, node):
        """Runs `node` in the narrow type: narrow inputs in, widened outputs out."""
        attrs = self.float_attrs(node)
        sig = signature(node.op, node.attrs)
        for i, v in enumerate(node.inputs):
            if sig.input_type_attrs[i] in attrs:
                node.inputs[i] = self.narrowed(v)
        for a in attrs:
            node.set_attr(a, type=self.narrow)
        for v, a in zip(node.outputs, sig.output_type_attrs):
            if a in attrs:
                consumers = self.users.pop(v, [])
                v.dtype = self.narrow
                wide = self.cast(v, dt.DT_FLOAT)
                self.widened[wide] = v
                for consumer, i in consumers:
                    consumer.inputs[i] = wide
                self.users[wide] = consumers

    def all_inputs_narrow(self, node):
        sig = signature(node.op, node.attrs)
        attrs = self.float_attrs(node)
        floats = [v for v, a in zip(node.inputs, sig.input_type_attrs) if a in attrs]
        # constants count as narrow: their Cast folds away (e.g. the 2.0 of x * 2.0)
        return any(v in self.widened for v in floats) and \
            all(v in self.widened or v.node.op == "Const" for v in floats)

    def round_inputs(self, node):
        """cube_fp16in_fp32out: float32 inputs rounded through float16, the op stays float32."""
        sig = signature(node.op, node.attrs)
        for i, (v, a) in enumerate(zip(node.inputs, sig.input_type_attrs)):
            if a == "T" and v.dtype == dt.DT_FLOAT:
                node.inputs[i] = self.cast(self.cast(v, dt.DT_HALF), dt.DT_FLOAT)


def run(c):
    mode = c.options.get("precision") or "must_keep_origin_dtype"
    if mode not in MODES:
        raise CompileError(f"precision mode {mode!r} is not implemented; allowed: "
                           f"{', '.join(MODES)}")
    cancel_casts.run(c)
    if mode == "must_keep_origin_dtype":
        return
    r = Rewriter(c.graph, MODES[mode] or dt.DT_HALF)
    topo = c.graph.topo_order()
    if mode == "cube_fp16in_fp32out":
        for node in topo:
            if node.op in CUBE and node.attr("T") == dt.DT_FLOAT \
                    and not node.attr(KEEP_DTYPE_ATTR):
                r.round_inputs(node)
    elif mode == "force_fp16":
        for node in topo:
            if not ops.get(node.op) or ops.get(node.op).trivial:
                continue
            if r.reducible(node):
                r.reduce(node)
    elif mode.startswith("allow_fp32_to_"):
        for node in topo:
            if node.op in CUBE and r.reducible(node):
                r.reduce(node)
    else:
        white, black, gray = mix_lists(c.options.get("modify_mixlist"))
        for node in topo:
            if node.op in black or not r.reducible(node):
                continue
            if node.op in white or (node.op in gray and r.all_inputs_narrow(node)):
                r.reduce(node)
    cancel_casts.run(c)            # e.g. the user's Cast(f16->f32) now feeding our Cast(->f16)
    infer_shapes.run(c)            # the new Casts and retyped ops get shapes (and folds)
