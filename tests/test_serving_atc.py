"""npu-atc and CannSession: a SavedModel compiled offline gives TF-on-CPU results, dynamic
batch included; unsupported ops are listed; bad feeds get clear errors."""

import numpy as np
import pytest
import tensorflow as tf

from npu_device.serving import CannSession, atc, container

RTOL, ATOL = 1e-5, 1e-6


class Mlp(tf.Module):
    def __init__(self):
        rng = np.random.default_rng(0)
        self.w1 = tf.Variable(rng.normal(size=(4, 16)).astype(np.float32))
        self.b1 = tf.Variable(rng.normal(size=(16,)).astype(np.float32))
        self.w2 = tf.Variable(rng.normal(size=(16, 3)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        h = tf.nn.relu(tf.matmul(x, self.w1) + self.b1)
        return {"probs": tf.nn.softmax(tf.matmul(h, self.w2)), "hidden": h}


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("sm") / "mlp")
    with tf.device("/CPU:0"):
        m = Mlp()
        tf.saved_model.save(m, path, signatures={"serving_default": m.serve})
    return path


def cpu_reference(path, x):
    with tf.device("/CPU:0"):
        fn = tf.saved_model.load(path).signatures["serving_default"]
        return {k: v.numpy() for k, v in fn(x=tf.constant(x)).items()}


@pytest.fixture(scope="module")
def dynamic_om(saved_model, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("om") / "mlp.om")
    assert atc.main(["--model", saved_model, "--output", out, "--input_shape", "x:-1,4",
                     "--dynamic_batch_size", "1,2,4,8"]) == 0
    return out


def test_dynamic_batch_round_trip(saved_model, dynamic_om):
    sess = CannSession(dynamic_om)
    assert sess.batch_sizes == (1, 2, 4, 8)
    assert [(i.name, i.shape) for i in sess.inputs] == [("x", (-1, 4))]
    assert sorted((o.name, o.shape) for o in sess.outputs) == [("hidden", (-1, 16)),
                                                                 ("probs", (-1, 3))]
    rng = np.random.default_rng(1)
    for n in (1, 3, 8, 11):         # exact, padded, largest, chunked + padded
        x = rng.normal(size=(n, 4)).astype(np.float32)
        got, want = sess.run({"x": x}), cpu_reference(saved_model, x)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=RTOL, atol=ATOL)


def test_static_shape_and_async_and_tf_function(saved_model, tmp_path):
    out = str(tmp_path / "static.om")
    assert atc.main(["--model", saved_model, "--output", out, "--input_shape", "x:5,4"]) == 0
    sess = CannSession(out)
    assert sess.batch_sizes == () and sess.inputs[0].shape == (5, 4)
    xs = [np.random.default_rng(i).normal(size=(5, 4)).astype(np.float32) for i in range(6)]
    futures = [sess.run_async({"x": x}) for x in xs]
    for x, f in zip(xs, futures):
        np.testing.assert_allclose(f.result()["probs"], cpu_reference(saved_model, x)["probs"],
                                   rtol=RTOL, atol=ATOL)
    got = sess.as_tf_function()(tf.constant(xs[0]))
    np.testing.assert_allclose(got["hidden"].numpy(), cpu_reference(saved_model, xs[0])["hidden"],
                               rtol=RTOL, atol=ATOL)
    with pytest.raises(ValueError, match=r"has shape \(4, 4\); the model expects \(5, 4\)"):
        sess.run({"x": xs[0][:4]})
    sess.close()


def test_bad_feeds_name_the_problem(dynamic_om):
    sess = CannSession(dynamic_om)
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match=r"unknown: \['y'\]; missing: \['x'\]"):
        sess.run({"y": x})
    with pytest.raises(ValueError, match="is float64; the model expects float32"):
        sess.run({"x": x.astype(np.float64)})
    with pytest.raises(ValueError, match=r"expects \(batch, 4\)"):
        sess.run({"x": np.zeros((2, 5), np.float32)})


def test_unsupported_ops_are_all_listed(tmp_path):
    class Strings(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x):
            s = tf.strings.as_string(x)
            return {"y": tf.strings.to_number(s) + tf.math.erfinv(x)}
    path = str(tmp_path / "sm")
    m = Strings()
    tf.saved_model.save(m, path, signatures={"serving_default": m.serve})
    gd, ins, outs = atc.load_saved_model(path)
    with pytest.raises(atc.AtcError) as e:
        atc.compile_graph(gd, ins, outs, "x:2,4")
    assert "AsString" in str(e.value) and "StringToNumber" in str(e.value)
    assert "string/variant values stay in TF" in str(e.value)


def test_cli_errors_and_container_checks(saved_model, dynamic_om, tmp_path, capsys):
    assert atc.main(["--model", saved_model, "--output", str(tmp_path / "a.om"),
                     "--signature", "nope"]) == 2
    assert "has no signature 'nope'" in capsys.readouterr().err
    assert atc.main(["--model", saved_model, "--output", str(tmp_path / "a.om"),
                     "--input_shape", "x:-1,4"]) == 2
    assert "give concrete dimensions" in capsys.readouterr().err
    assert atc.main(["--model", saved_model, "--output", str(tmp_path / "a.om"),
                     "--input_shape", "x:2,4", "--precision_mode", "fp8"]) == 2
    assert "must_keep_origin_dtype" in capsys.readouterr().err
    # an empty GraphDef, a directory that is no SavedModel: errors, and no file written
    empty = tmp_path / "empty.pb"
    empty.write_bytes(b"")
    for model, text in ((empty, "has no inputs"), (tmp_path, "is not a SavedModel directory")):
        assert atc.main(["--model", str(model), "--output", str(tmp_path / "b.om")]) == 2
        assert text in capsys.readouterr().err
        assert not (tmp_path / "b.om").exists()
    data = bytearray(open(dynamic_om, "rb").read())
    data[-1] ^= 0xFF
    with pytest.raises(container.ContainerError, match="checksum mismatch"):
        container.unpack(bytes(data))
    # a model labelled with another batch size than it takes: refused at load (run() pads a
    # request to the label's rows: 2**31 of them was a MemoryError on every request)
    manifest, models = container.read(dynamic_om)
    small = min(models)
    relabelled = tmp_path / "relabelled.om"
    relabelled.write_bytes(container.pack(manifest, {2**31: models[small]}))
    with pytest.raises(container.ContainerError, match="labelled batch size 2147483648"):
        CannSession(str(relabelled))


def test_precision_mode_reaches_the_compiler(saved_model, tmp_path):
    out = str(tmp_path / "fp16.om")
    assert atc.main(["--model", saved_model, "--output", out, "--input_shape", "x:3,4",
                     "--precision_mode", "force_fp16"]) == 0
    sess = CannSession(out)
    assert sess.manifest["precision"] == "force_fp16"
    x = np.random.default_rng(2).normal(size=(3, 4)).astype(np.float32)
    got = sess.run({"x": x})["hidden"]
    want = cpu_reference(saved_model, x)["hidden"]
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)   # fp16 arithmetic
    assert not np.array_equal(got, want)


def test_frozen_graphdef_input(saved_model, tmp_path):
    gd, _, _ = atc.load_saved_model(saved_model)
    pb, out = tmp_path / "frozen.pb", str(tmp_path / "frozen.om")
    pb.write_bytes(gd.SerializeToString())
    sinks = [n.name for n in gd.node if n.op == "Identity" and not any(
        i.split(":")[0] == n.name for m in gd.node for i in m.input)]
    assert atc.main(["--model", str(pb), "--output", out, "--input_shape", "x:-1,4",
                     "--dynamic_batch_size", "2,4"]) == 0
    sess = CannSession(out)
    assert sorted(o.name for o in sess.outputs) == sorted(sinks)
    x = np.random.default_rng(3).normal(size=(3, 4)).astype(np.float32)
    got = sess.run({"x": x})
    want = cpu_reference(saved_model, x)
    for value in got.values():     # output names are graph node names here: match by shape
        key = "probs" if value.shape[1] == 3 else "hidden"
        np.testing.assert_allclose(value, want[key], rtol=RTOL, atol=ATOL)
