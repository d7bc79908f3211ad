"""Folds layout Transposes into TransData: NC1HWC0 values are logically NHWC, and TransData
reads and writes NCHW directly, so

    Transpose(x_nchw, perm=[0,2,3,1]) -> TransData(ND -> NC1HWC0)  becomes  TransData(NCHW -> NC1HWC0)(x_nchw)
    TransData(NC1HWC0 -> ND) -> Transpose(perm=[0,3,1,2])          becomes  TransData(NC1HWC0 -> NCHW)

which saves the Transpose kernels without adding a TransData."""
from graph_engine.ops.formats import Format
from graph_engine.compiler.passes.layout.insert_transdata import transdata

TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def perm(node):
    v = node.inputs[1]
    return None if v.const is None else [int(x) for x in v.const.reshape(-1)]


def run(c):
    g = c.graph
    users = g.data_consumers()
    absorbed = 0
    for node in list(g.topo_order()):
        if node.op != "TransData":
            continue
        src, dst = node.attr("src_format"), node.attr("dst_format")
        x = node.inputs[0]
        if src == Format.ND and dst == Format.NC1HWC0 and x.node.op == "Transpose" \
                and perm(x.node) == TO_NHWC and x.format is None:
            new = transdata(g, x.node.inputs[0], Format.NCHW, Format.NC1HWC0)
            g.replace_uses(node.outputs[0], new.outputs[0], users)
            absorbed += 1
        elif src == Format.NC1HWC0 and dst == Format.ND:
            for user, _ in list(users.get(node.outputs[0], ())):
                if user.op == "Transpose" and perm(user) == TO_NCHW and user.inputs[0] is node.outputs[0]:
                    new = transdata(g, x, Format.NC1HWC0, Format.NCHW)
                    g.replace_uses(user.outputs[0], new.outputs[0], users)
                    absorbed += 1
        if absorbed:
            users = g.data_consumers()
    return {"absorbed": absorbed}
