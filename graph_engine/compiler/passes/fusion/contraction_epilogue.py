"""Contraction + BiasAdd (+ residual Add) + activation -> one NpuFused* kernel.

    Conv2D | DepthwiseConv2dNative | MatMul | BatchMatMulV2/V3
      -> [BiasAdd(b) | Add(b) with b of shape [channels], channels last]
      -> [Add/AddV2(residual of the output's shape)]     (the bias may also follow the residual)
      -> [Relu | Relu6 | Elu | LeakyRelu | Sigmoid | Tanh | NpuGelu | x * Sigmoid(x)]

Each value inside the pattern must have no consumer outside it (training graphs read forward
values in the backward pass: a pre-activation that ReluGrad or LeakyReluGrad reads stays a
value of its own, so the chain stops before the activation). All values share one float dtype,
so a Cast (mixed precision) ends the chain.
"""
from graph_engine import ops
from graph_engine.compiler.passes.fusion.rewrite import Rewriter, is_float, is_scalar, other_input

FUSED = {"Conv2D": "NpuFusedConv2D", "DepthwiseConv2dNative": "NpuFusedDepthwiseConv2D",
         "MatMul": "NpuFusedMatMul", "BatchMatMulV2": "NpuFusedBatchMatMul",
         "BatchMatMulV3": "NpuFusedBatchMatMul"}


def channel_axis(node, rank):
    """The output channel axis of a contraction or a BiasAdd (NCHW puts it at 1)."""
    nchw = node.attr("data_format", "NHWC") in ("NCHW", b"NCHW") and rank > 2
    return 1 if nchw else rank - 1


def _same(v, ref):
    return v.dtype == ref.dtype and v.shape == ref.shape


def _bias(rw, node, cur):
    """(BiasAdd-like node, bias value) consuming `cur`, else (None, None)."""
    user = rw.sole_user(cur, ("BiasAdd",) + ops.having("commutative_add"))
    if user is None:
        return None, None
    axis = channel_axis(node, len(cur.shape))
    channels = (cur.shape[axis],)
    if user.op == "BiasAdd":
        b = user.inputs[1]
        ok = user.inputs[0] is cur and channel_axis(user, len(cur.shape)) == axis
    else:
        b = other_input(user, cur)
        ok = b is not None and axis == len(cur.shape) - 1   # an Add broadcasts on the last axis
    if ok and b.dtype == cur.dtype and b.shape == channels and _same(user.outputs[0], cur):
        return user, b
    return None, None


def _residual(rw, cur):
    user = rw.sole_user(cur, ops.having("commutative_add"))
    r = other_input(user, cur) if user is not None else None
    if r is not None and _same(r, cur) and _same(user.outputs[0], cur):
        return user, r
    return None, None


def _activation(rw, cur):
    """(nodes, activation name, alpha, output value) of the activation applied to `cur`."""
    users = [n for n, _ in rw.uses(cur)]
    if len(users) == 1:
        n = users[0]
        if ops.has(n.op, "epilogue") and _same(n.outputs[0], cur):
            return [n], n.op, float(n.attr("alpha", 0.2)), n.outputs[0]
        if n.op == "NpuGelu" and _same(n.outputs[0], cur):
            return [n], "GeluTanh" if n.attr("approximate") else "GeluExact", 0.2, n.outputs[0]
    # Swish/SiLU: cur * Sigmoid(cur), Keras as cur * Sigmoid(1.0 * cur).
    if len(users) == 2:
        for mul, pre in (users, users[::-1]):
            sig = pre
            beta = other_input(pre, cur) if pre.op == "Mul" else None
            if beta is not None and is_scalar(beta, 1.0):
                sig = rw.sole_user(pre.outputs[0], "Sigmoid")
            if sig is None or sig.op != "Sigmoid" or mul.op != "Mul":
                continue
            if other_input(mul, cur) is sig.outputs[0] and rw.sole_user(sig.outputs[0]) is mul \
                    and _same(mul.outputs[0], cur):
                return list(dict.fromkeys([pre, sig, mul])), "Swish", 0.2, mul.outputs[0]
    return None


def fuse(rw, node):
    out = node.outputs[0]
    if not is_float(out) or out.shape is None:
        return False
    chain, cur, bias, residual = [node], out, None, None
    # Keras' Dense on a rank > 2 input: MatMul -> Reshape (same last axis) -> BiasAdd -> act;
    # the epilogue then runs before the reshape.
    via = rw.sole_user(out, "Reshape") if node.op == "MatMul" else None
    if via is not None and via.inputs[0] is out and via.outputs[0].shape and \
            via.outputs[0].shape[-1:] == out.shape[-1:]:
        cur = via.outputs[0]
    else:
        via = None
    user, bias = _bias(rw, node, cur)
    if user is not None:
        chain.append(user)
        cur = user.outputs[0]
    user, residual = _residual(rw, cur) if via is None else (None, None)
    if user is not None:
        chain.append(user)
        cur = user.outputs[0]
        if bias is None:        # Keras' RNN cells: x @ W + h @ U, then the bias
            user, bias = _bias(rw, node, cur)
            if user is not None:
                chain.append(user)
                cur = user.outputs[0]
    act = _activation(rw, cur)
    activation, alpha = "", 0.2
    if act is not None:
        nodes, activation, alpha, cur = act
        chain += nodes
    if len(chain) == 1:
        return False
    inputs = list(node.inputs) + [v for v in (bias, residual) if v is not None]
    fused = rw.add(chain[-1].name + "/fused", FUSED[node.op], inputs, dict(node.attrs),
                   output_dtypes=[out.dtype])
    fused.device = node.device
    fused.set_attr("has_bias", bias is not None)
    fused.set_attr("has_residual", residual is not None)
    fused.set_attr("activation", activation)
    fused.set_attr("alpha", float(alpha))
    fused.outputs[0].shape = out.shape
    if via is not None:         # the chain's consumers read the reshaped fused result
        rw.replace_uses(cur, via.outputs[0])
        rw.set_input(via, 0, fused.outputs[0])
    rw.replace_chain(chain, fused, cur)
    return True


def run(c):
    rw = Rewriter(c)
    count = 0
    for node in c.graph.topo_order():
        if node.op in FUSED and node.name in c.graph.nodes:
            count += fuse(rw, node)
    return {"fused": count}
