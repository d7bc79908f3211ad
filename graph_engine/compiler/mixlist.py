"""The mixed-precision op lists (allow_mix_precision_fp16 / _bf16) and modify_mixlist.

white  reduce to float16/bfloat16 (matrix ops: the cube unit computes them in fp16 with fp32
       accumulation, so they gain speed and lose little)
black  keep float32 (range- or accuracy-sensitive: exponentials, logs, reductions, losses)
gray   follow the producers: reduce only when every float input already is narrow

Like TF's auto mixed precision (allow/deny/infer lists). docs/precision.md shows this table;
tests/test_precision_lists.py keeps it in sync (`python -m graph_engine.compiler.mixlist`
prints it).
"""
import json
import os

from graph_engine.ops.errors import CompileError

WHITE = frozenset({"MatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv2D", "Conv2DBackpropInput",
                   "Conv2DBackpropFilter", "DepthwiseConv2dNative",
                   "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter"})
CUBE = WHITE            # the matrix ops of allow_fp32_to_* and cube_fp16in_fp32out
BLACK = frozenset({"Exp", "Log", "Log1p", "Pow", "Softmax", "LogSoftmax", "Sum", "Mean", "Prod",
                   "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits",
                   "Softplus", "SoftplusGrad", "Rsqrt", "Sqrt", "RsqrtGrad", "SqrtGrad",
                   "Reciprocal", "RealDiv", "Div", "L2Loss", "FusedBatchNormV3",
                   "FusedBatchNormGradV3", "SquaredDifference"})
GRAY = frozenset({"Add", "AddV2", "AddN", "Sub", "Mul", "Neg", "Abs", "Square", "Maximum",
                  "Minimum", "BiasAdd", "BiasAddGrad", "Relu", "Relu6", "ReluGrad", "Relu6Grad",
                  "LeakyRelu", "LeakyReluGrad", "Elu", "EluGrad", "Sigmoid", "SigmoidGrad",
                  "Tanh", "TanhGrad", "MaxPool", "MaxPoolGrad", "AvgPool", "AvgPoolGrad",
                  "Reshape", "Squeeze", "ExpandDims", "Transpose", "ConcatV2", "Pack", "Unpack",
                  "Slice", "StridedSlice", "StridedSliceGrad", "Tile", "BroadcastTo", "Pad",
                  "Split", "SplitV", "Identity", "IdentityN", "SelectV2", "Select"})
LISTS = ("white-list", "black-list", "gray-list")


def _parse(modify):
    if not isinstance(modify, str):
        return modify or {}
    text = modify.strip()
    if not text:
        return {}
    if not text.startswith("{") and os.path.exists(text):
        with open(text) as f:
            text = f.read()
    try:
        return json.loads(text)
    except ValueError as e:
        raise CompileError(f"modify_mixlist is neither a JSON object nor a readable JSON "
                           f"file: {e}") from None


def mix_lists(modify=None):
    """(white, black, gray) after modify_mixlist: a dict, JSON text or a JSON file path.
    An op added to one list leaves the others."""
    lists = {"white-list": set(WHITE), "black-list": set(BLACK), "gray-list": set(GRAY)}
    for name, change in _parse(modify).items():
        if name not in lists:
            raise CompileError(f"modify_mixlist: unknown list {name!r}; allowed: "
                               f"{', '.join(LISTS)}")
        lists[name] -= set(change.get("to-remove", []))
        for op in change.get("to-add", []):
            for other in lists.values():
                other.discard(op)
            lists[name].add(op)
    return lists["white-list"], lists["black-list"], lists["gray-list"]


def markdown_table():
    """The lists as the Markdown table docs/precision.md embeds."""
    rows = ["| list | ops |", "|---|---|"]
    for name, ops in (("white", WHITE), ("black", BLACK), ("gray", GRAY)):
        rows.append(f"| {name} | {', '.join(f'`{op}`' for op in sorted(ops))} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
