"""Training: an activation gradient and the BiasAddGrad of that gradient -> one
NpuFusedActivationGradBiasAddGrad kernel producing both in one pass over memory:

    dx = ReluGrad(dy, y)  (any op with the trait gradient_of: Relu6Grad, SigmoidGrad ...)
    db = BiasAddGrad(dx)

dx keeps its other consumers (the contraction's input and filter gradients read it).
"""
from graph_engine import ops
from graph_engine.compiler.passes.fusion.rewrite import Rewriter, is_float


def run(c):
    rw = Rewriter(c)
    count = 0
    for node in c.graph.topo_order():
        if node.op != "BiasAddGrad" or node.name not in c.graph.nodes:
            continue
        dx = node.inputs[0]
        grad = dx.node
        if not ops.has(grad.op, "gradient_of") or not is_float(dx) \
                or node.outputs[0].dtype != dx.dtype:
            continue
        op = ops.get(grad.op)
        g, f = (grad.inputs[i] for i in op.gradient_inputs)
        if g.shape != f.shape or g.shape != dx.shape or len(dx.shape) < 2:
            continue
        fused = rw.add(grad.name + "/bias_grad_fused", "NpuFusedActivationGradBiasAddGrad",
                       [g, f], {"T": grad.attrs["T"]}, output_dtypes=[dx.dtype, dx.dtype])
        fused.device = grad.device
        fused.set_attr("activation", op.gradient_of)
        fused.set_attr("alpha", float(grad.attr("alpha", 0.2)))
        fused.set_attr("data_format", node.attr("data_format", "NHWC") or "NHWC")
        fused.outputs[0].shape, fused.outputs[1].shape = dx.shape, node.outputs[0].shape
        fused.control_inputs = list(dict.fromkeys(grad.control_inputs + node.control_inputs))
        rw.replace_uses(dx, fused.outputs[0])
        rw.replace_chain([grad, node], fused, node.outputs[0], fused.outputs[1])
        count += 1
    return {"fused": count}
