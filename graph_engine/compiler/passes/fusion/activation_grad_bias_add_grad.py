"""Training: an activation gradient and the BiasAddGrad of that gradient -> one
NpuFusedActivationGradBiasAddGrad kernel producing both in one pass over memory:

    dx = ReluGrad(dy, y)  (Relu6Grad, LeakyReluGrad, EluGrad, SigmoidGrad, TanhGrad)
    db = BiasAddGrad(dx)

dx keeps its other consumers (the contraction's input and filter gradients read it).
"""
from graph_engine.compiler.passes.fusion.rewrite import Rewriter, is_float

# gradient op -> (activation, position of the incoming gradient, of the forward value)
GRADS = {"ReluGrad": ("Relu", 0, 1), "Relu6Grad": ("Relu6", 0, 1),
         "LeakyReluGrad": ("LeakyRelu", 0, 1), "EluGrad": ("Elu", 0, 1),
         "SigmoidGrad": ("Sigmoid", 1, 0), "TanhGrad": ("Tanh", 1, 0)}


def run(c):
    rw = Rewriter(c)
    count = 0
    for node in c.graph.topo_order():
        if node.op != "BiasAddGrad" or node.name not in c.graph.nodes:
            continue
        dx = node.inputs[0]
        grad = dx.node
        if grad.op not in GRADS or not is_float(dx) or node.outputs[0].dtype != dx.dtype:
            continue
        act, gi, fi = GRADS[grad.op]
        g, f = grad.inputs[gi], grad.inputs[fi]
        if g.shape != f.shape or g.shape != dx.shape or len(dx.shape) < 2:
            continue
        fused = rw.add(grad.name + "/bias_grad_fused", "NpuFusedActivationGradBiasAddGrad",
                       [g, f], {"T": grad.attrs["T"]}, output_dtypes=[dx.dtype, dx.dtype])
        fused.device = grad.device
        fused.set_attr("activation", act)
        fused.set_attr("alpha", float(grad.attr("alpha", 0.2)))
        fused.set_attr("data_format", node.attr("data_format", "NHWC") or "NHWC")
        fused.outputs[0].shape, fused.outputs[1].shape = dx.shape, node.outputs[0].shape
        fused.control_inputs = list(dict.fromkeys(grad.control_inputs + node.control_inputs))
        rw.replace_uses(dx, fused.outputs[0])
        rw.replace_chain([grad, node], fused, node.outputs[0], fused.outputs[1])
        count += 1
    return {"fused": count}
