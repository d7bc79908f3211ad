"""Layout passes on small IR graphs (graph_engine/compiler/passes/layout/): which nodes run in
NC1HWC0, where TransData goes, and how many are left after absorbing Transposes, sinking,
cancelling and folding. Every graph is compiled to a model and run on the reference
executor with the passes on and off; results must agree (1e-5)."""
import numpy as np
import pytest

from graph_engine.compiler import attrs as attr_util
from graph_engine.ops import dtypes as dt
from graph_engine.compiler import reference_executor
from graph_engine.compiler.graph import Graph
from graph_engine.ops.formats import Format
from graph_engine.compiler.node import Node
from graph_engine.compiler.pass_manager import Compilation
from graph_engine.compiler.passes import (eliminate_dead_code, infer_shapes, lower, plan_memory)
from graph_engine.compiler.passes.layout import (absorb_transposes, assign_formats,
                                                 cancel_transdata, fold_transdata,
                                                 insert_transdata, sink_transdata, support)
from graph_engine.compiler import serialize

F32 = dt.DT_FLOAT
TYPE_ATTRS = ("T", "Tidx", "Tperm", "Tpaddings", "dtype", "SrcT", "DstT")
LAYOUT = (assign_formats, insert_transdata, absorb_transposes, sink_transdata, cancel_transdata,
          fold_transdata)


class Builder:
    def __init__(self, seed=0):
        self.g, self.shapes, self.feeds = Graph(), [], []
        self.rng = np.random.default_rng(seed)

    def _add(self, op, inputs=(), out_dtypes=(F32,), **attrs):
        attrs = {k: attr_util.make(type=v) if k in TYPE_ATTRS else attr_util.make(v)
                 for k, v in attrs.items()}
        node = self.g.add(Node(self.g.unique_name(op.lower()), op, inputs=list(inputs),
                               output_dtypes=list(out_dtypes), attrs=attrs))
        return node.outputs[0] if node.outputs else node

    def arg(self, shape):
        self.feeds.append(self.rng.standard_normal(shape).astype(np.float32))
        self.shapes.append(tuple(shape))
        return self._add("_Arg", T=F32, index=len(self.shapes) - 1)

    def const(self, value, dtype=F32):
        value = np.asarray(value, dt.numpy_dtype(dtype))
        tensor = attr_util.make(tensor=attr_util.numpy_to_tensor(value, dtype))
        return self.g.add(Node(self.g.unique_name("const"), "Const", output_dtypes=[dtype],
                               attrs={"dtype": attr_util.make(type=dtype), "value": tensor})).outputs[0]

    def weights(self, shape):
        return self.const(self.rng.standard_normal(shape) * 0.3)

    def conv(self, x, w, stride=1, fmt="NHWC"):
        s = [1, 1, stride, stride] if fmt == "NCHW" else [1, stride, stride, 1]
        return self._add("Conv2D", [x, w], out_dtypes=(x.dtype,), T=x.dtype, strides=s,
                         padding="SAME", data_format=fmt)

    def cast(self, x, dtype):
        return self._add("Cast", [x], out_dtypes=(dtype,), SrcT=x.dtype, DstT=dtype)

    def op(self, op, *inputs, **attrs):
        return self._add(op, inputs, T=F32, **attrs)

    def ints(self, values):
        return self.const(values, dt.DT_INT32)

    def compile(self, *outputs):
        for i, v in enumerate(outputs):
            self._add("_Retval", [v], out_dtypes=(), T=v.dtype, index=i)
        c = Compilation(name="test", graph=self.g, input_shapes=list(self.shapes))
        infer_shapes.run(c)
        return c


def finish(c, passes):
    """Runs `passes`, DCE and the back end; returns (model, merged stats)."""
    stats = {}
    for p in passes + (eliminate_dead_code,):
        stats.update(p.run(c) or {})
    for p in (lower, plan_memory, serialize):
        p.run(c)
    return c.model, stats


def check(build, passes=LAYOUT):
    """Compiles build() with and without `passes`; same results; returns (model, stats)."""
    b_off, b_on = Builder(), Builder()
    plain, _ = finish(build(b_off), ())
    model, stats = finish(build(b_on), passes)
    want = reference_executor.run(plain, b_off.feeds)
    got = reference_executor.run(model, b_on.feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    return model, stats


def kernels(model):
    return [k.kernel for k in model.kernels]


def transdata(model):
    return [(Format(k.attrs["src_format"]).name, Format(k.attrs["dst_format"]).name)
            for k in model.kernels if k.kernel == "TransData"]


def cnn(b):
    x = b.arg((2, 9, 9, 3))
    y = b.op("Relu", b.conv(x, b.weights((3, 3, 3, 20))))
    y = b.op("Mul", y, b.const(np.linspace(0.5, 1.5, 20)))            # per-channel scale
    y = b.op("MaxPool", y, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID")
    y = b.op("Relu6", b.op("AddV2", b.conv(y, b.weights((3, 3, 20, 20))), y))  # residual
    return b.compile(b.op("Mean", y, b.ints([1, 2]), Tidx=dt.DT_INT32, keep_dims=False))


def test_cnn_runs_in_nc1hwc0_with_one_transdata_and_folded_filters():
    model, stats = check(cnn)
    assert transdata(model) == [("ND", "NC1HWC0")]        # Mean writes ND itself
    assert stats["folded"] == 3                           # two filters and the scale vector
    formats = {model.values[k.outputs[0]].format for k in model.kernels if k.kernel == "Conv2D"}
    assert formats == {Format.NC1HWC0}
    filters = [model.values[k.inputs[1]] for k in model.kernels if k.kernel == "Conv2D"]
    assert all(f.format == Format.FILTER_KN and f.kind == 1 for f in filters)   # constants


def test_filters_that_are_graph_inputs_keep_a_per_step_weight_transdata():
    def build(b):
        x, w = b.arg((1, 6, 6, 5)), b.arg((3, 3, 5, 7))
        return b.compile(b.op("Relu", b.conv(x, w)))
    model, _ = check(build)
    assert sorted(transdata(model)) == sorted([("ND", "FILTER_KN"), ("ND", "NC1HWC0"), ("NC1HWC0", "ND")])


def test_half_filters_are_stored_fractal_z():
    # conv_5hd.cc reads FILTER_KN in place in float32 only; other floats keep FRACTAL_Z
    def build(b):
        half = dt.DT_HALF
        y = b.conv(b.cast(b.arg((1, 6, 6, 5)), half), b.cast(b.arg((3, 3, 5, 7)), half))
        return b.compile(b.op("Relu", b.cast(y, F32)))
    model, _ = check(build)
    assert ("ND", "FRACTAL_Z") in transdata(model)
    assert not any(dst == "FILTER_KN" for _, dst in transdata(model))


@pytest.mark.parametrize("case", ["no_convolution", "nchw_conv", "depth_multiplier_2", "rank_3"])
def test_graphs_without_a_5hd_convolution_stay_nd(case):
    def build(b):
        if case == "no_convolution":
            x = b.arg((2, 4, 4, 8))
            return b.compile(b.op("MaxPool", b.op("Relu", x), ksize=[1, 2, 2, 1],
                                  strides=[1, 2, 2, 1], padding="VALID"))
        if case == "nchw_conv":
            return b.compile(b.op("Relu", b.conv(b.arg((1, 3, 6, 6)), b.weights((3, 3, 3, 4)),
                                                 fmt="NCHW")))
        if case == "depth_multiplier_2":
            return b.compile(b.op("DepthwiseConv2dNative", b.arg((1, 6, 6, 4)), b.weights((3, 3, 4, 2)),
                                  strides=[1, 1, 1, 1], padding="SAME"))
        return b.compile(b.op("Relu", b.arg((4, 4, 8))))
    model, stats = check(build)
    assert "TransData" not in kernels(model) and stats["nc1hwc0_nodes"] == 0


def test_regions_whose_activations_are_read_in_nd_again_stay_nd():
    """The forward half of a training step: every activation is also an ND output."""
    def build(b):
        x = b.arg((1, 6, 6, 4))
        c1 = b.conv(x, b.weights((3, 3, 4, 4)))
        r = b.op("Relu", c1)
        c2 = b.conv(r, b.weights((3, 3, 4, 4)))
        return b.compile(c2, c1, r)
    model, stats = check(build)
    assert "TransData" not in kernels(model)
    assert stats["kept_nd"] == 3 and stats["nc1hwc0_nodes"] == 0


def test_transposes_from_and_to_nchw_are_absorbed():
    def build(b):
        x = b.arg((2, 5, 6, 6))                                     # NCHW input
        y = b.op("Transpose", x, b.ints([0, 2, 3, 1]), Tperm=dt.DT_INT32)
        y = b.op("Relu", b.conv(y, b.weights((3, 3, 5, 18))))
        return b.compile(b.op("Transpose", y, b.ints([0, 3, 1, 2]), Tperm=dt.DT_INT32))
    model, stats = check(build)
    assert "Transpose" not in kernels(model) and stats["absorbed"] == 2
    assert sorted(transdata(model)) == [("NC1HWC0", "NCHW"), ("NCHW", "NC1HWC0")]


def test_a_transpose_with_another_permutation_is_not_absorbed():
    def build(b):
        y = b.op("Relu", b.conv(b.arg((1, 6, 6, 5)), b.weights((3, 3, 5, 8))))
        return b.compile(b.op("Transpose", y, b.ints([0, 2, 1, 3]), Tperm=dt.DT_INT32))
    model, stats = check(build)
    assert "Transpose" in kernels(model) and stats["absorbed"] == 0


def two_convs_with_nd_elementwise_between(b):
    """Only the convolutions are marked (as if assign_formats had stopped there)."""
    x = b.arg((1, 6, 6, 5))
    y = b.op("Relu", b.conv(x, b.weights((3, 3, 5, 17))))
    y = b.op("Sigmoid", b.op("Mul", y, b.const(2.0)))
    c = b.compile(b.conv(y, b.weights((3, 3, 17, 9))))
    for n in c.graph:
        if n.op == "Conv2D":
            support.mark(n)
    return c


def test_transdata_sinks_through_elementwise_ops_and_cancels():
    model, stats = check(two_convs_with_nd_elementwise_between,
                         (insert_transdata, sink_transdata, cancel_transdata, fold_transdata))
    assert stats["inserted"] == 6 and stats["sunk"] + stats["hoisted"] == 3
    assert transdata(model) == [("ND", "NC1HWC0"), ("NC1HWC0", "ND")]
    assert all(model.values[k.outputs[0]].format == Format.NC1HWC0 for k in model.kernels
               if k.kernel in ("Relu", "Mul", "Sigmoid"))


def test_without_sinking_the_conversions_stay():
    model, stats = check(two_convs_with_nd_elementwise_between,
                         (insert_transdata, cancel_transdata, fold_transdata))
    assert len(transdata(model)) == 4 and stats["cancelled"] == 0


def test_no_sinking_when_an_input_conversion_is_still_needed_elsewhere():
    """Relu reads the conversion that the ND output needs too: moving it saves nothing."""
    def build(b):
        x = b.arg((1, 6, 6, 5))
        c = b.conv(x, b.weights((3, 3, 5, 17)))
        c2 = b.compile(b.op("Relu", c), c)
        for n in c2.graph:
            if n.op == "Conv2D":
                support.mark(n)
        return c2
    model, stats = check(build, (insert_transdata, sink_transdata, cancel_transdata))
    assert stats["sunk"] == 0 and "Relu" in kernels(model)
    assert transdata(model).count(("NC1HWC0", "ND")) == 1


def test_cancel_and_merge_on_hand_made_conversions():
    def build(b):
        x = b.arg((2, 3, 3, 20))
        c = b.compile(b.op("Relu", x), b.op("Tanh", x))
        g = c.graph
        relu, tanh = sorted((n for n in g if n.op in ("Relu", "Tanh")), key=lambda n: n.op)
        for consumer in (relu, tanh):             # ND -> 5HD -> ND in front of each reader
            there = insert_transdata.transdata(g, x, None, Format.NC1HWC0)
            back = insert_transdata.transdata(g, there.outputs[0], Format.NC1HWC0, None)
            consumer.inputs[0] = back.outputs[0]
        return c
    model, stats = check(build, (cancel_transdata,))
    assert "TransData" not in kernels(model)
    assert stats["cancelled"] + stats["merged"] >= 2


def test_pad_concat_bias_add_and_pool_join_the_region():
    def build(b):
        x = b.arg((1, 7, 7, 6))
        y = b.op("Pad", x, b.ints([[0, 0], [1, 1], [1, 1], [0, 0]]), Tpaddings=dt.DT_INT32)
        y = b.op("BiasAdd", b.conv(y, b.weights((3, 3, 6, 10))), b.weights((10,)), data_format="NHWC")
        z = b.op("AvgPool", y, ksize=[1, 3, 3, 1], strides=[1, 1, 1, 1], padding="SAME")
        y = b._add("ConcatV2", [y, z, b.ints(3)], T=F32, N=2, Tidx=dt.DT_INT32)
        return b.compile(b.op("Mean", y, b.ints([1, 2]), Tidx=dt.DT_INT32, keep_dims=True))
    model, stats = check(build)
    assert transdata(model) == [("ND", "NC1HWC0"), ("NC1HWC0", "ND")]
    assert stats["nc1hwc0_nodes"] == 6


def test_a_lone_convolution_between_nd_ops_stays_nd():
    """Two conversions to run one convolution in NC1HWC0 between ND Softmaxes: not worth it."""
    def build(b):
        x = b.op("Softmax", b.arg((1, 6, 6, 5)))
        return b.compile(b.op("Softmax", b.conv(x, b.weights((3, 3, 5, 8)))))
    model, stats = check(build)
    assert "TransData" not in kernels(model) and stats["kept_nd"] == 1


def test_a_lone_convolution_between_graph_input_and_output_runs_nc1hwc0():
    def build(b):
        return b.compile(b.op("Relu", b.conv(b.arg((1, 6, 6, 5)), b.weights((3, 3, 5, 8)))))
    model, stats = check(build)
    assert transdata(model) == [("ND", "NC1HWC0"), ("NC1HWC0", "ND")] and stats["nc1hwc0_nodes"] == 2
