"""Each option of issue 14 parts 5 and 6 does what docs/options.md says, shown by its effect:
deterministic, variable_memory_max_size, device_id against device_count, overflow_mode,
enable_graph_kernel, the Ascend names accepted without effect, and a quiet quickstart.

Everything runs in fresh interpreters (thread counts, device counts and option side effects are
per process), each with a deadline."""
import json

import pytest

from tests.conftest import run_python

TIMEOUT = 300


def _ok(result):
    assert result.returncode == 0 and "OK" in result.stdout, \
        (result.stdout[-2000:], result.stderr[-4000:])
    return result


# --- deterministic -------------------------------------------------------------------------------

# One training step of a model with every kernel whose partition used to follow the thread
# count: matrix products (row/column ranges of the GEMM), Conv2D and its filter gradient (partial
# sums per thread), the fused activation + BiasAdd gradients (partial sums per thread), batch
# norm, layer norm, softmax cross-entropy and elementwise chains (parallel range boundaries).
TRAIN_STEP = """
    import hashlib, json
    import numpy as np
    import npu_device
    npu_device.set_npu_config(deterministic=True)
    import keras
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x1 = rng.normal(size=(64, 16, 16, 3)).astype(np.float32)
    x2 = rng.normal(size=(64, 300)).astype(np.float32)
    y = rng.integers(0, 10, 64).astype(np.int32)
    a, b = keras.Input((16, 16, 3)), keras.Input((300,))
    h = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(a)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.Conv2D(32, 3, activation="relu")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    g = keras.layers.Dense(512, activation="relu")(b)
    g = keras.layers.LayerNormalization()(g)
    g = keras.layers.Dense(256, activation="gelu")(g)
    out = keras.layers.Dense(10)(keras.layers.Concatenate()([h, g]))
    model = keras.Model([a, b], out)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit([x1, x2], y, batch_size=64, epochs=2, verbose=0)
    digest = {w.path: hashlib.sha256(np.asarray(w.numpy()).tobytes()).hexdigest()
              for w in model.weights}
    print("WEIGHTS " + json.dumps(digest))
    print("OK")
"""


def _weights(threads):
    result = _ok(run_python(TRAIN_STEP, env={"NPU_NUM_THREADS": str(threads)}, timeout=TIMEOUT))
    line = next(l for l in result.stdout.splitlines() if l.startswith("WEIGHTS "))
    return json.loads(line[len("WEIGHTS "):])


def test_deterministic_training_is_bit_identical_with_one_and_two_threads():
    one, two = _weights(1), _weights(2)
    assert one.keys() == two.keys() and len(one) == 16
    differing = sorted(k for k in one if one[k] != two[k])
    assert not differing, f"weights differ between NPU_NUM_THREADS=1 and 2: {differing}"


def test_deterministic_reaches_the_runtime_as_a_kernel_attribute():
    # The compile option becomes the executor attribute `_deterministic` of every kernel (only
    # when set: default compiles are unchanged), and the runtime loads and runs such models.
    import numpy as np
    from graph_engine.compiler import compile as ge_compile, model_format
    from graph_engine.compiler.pipeline import pipeline
    from graph_engine.compiler.devtools import op_request
    from npu_device import _C
    rng = np.random.default_rng(0)
    a, b = (rng.normal(size=(96, 80)).astype(np.float32) for _ in range(2))
    nd, inputs = op_request("MatMul", {"a": a, "b": b.T.copy()})

    def compiled(opts):
        return pipeline().run(ge_compile.compilation_for(nd.SerializeToString(), opts)).model

    plain, marked = compiled({}), compiled({"deterministic": True})
    assert all("_deterministic" not in k.attrs for k in plain.kernels)
    assert marked.kernels and all(k.attrs["_deterministic"] is True for k in marked.kernels)
    out_plain = _C.load_model(model_format.serialize(plain)).run(inputs)[0]
    out_marked = _C.load_model(model_format.serialize(marked)).run(inputs)[0]
    np.testing.assert_allclose(out_marked, a @ b.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out_marked, out_plain, rtol=1e-5, atol=1e-5)


# --- variable_memory_max_size ----------------------------------------------------------------


def test_variable_memory_max_size_refuses_variables_past_the_limit():
    _ok(run_python("""
        import gc
        import numpy as np, tensorflow as tf
        import npu_device
        npu_device.set_npu_config(variable_memory_max_size="1M")
        small = tf.Variable(tf.zeros([128 * 1024]))              # 512 KiB: fits
        assert small.device.endswith("NPU:0"), small.device
        stats = npu_device.memory_stats()
        assert stats["variable_bytes"] == 512 << 10 and stats["variable_limit"] == 1 << 20, stats
        try:
            tf.Variable(tf.zeros([2 * 1024 * 1024]))              # 8 MiB: refused
        except tf.errors.ResourceExhaustedError as e:
            message = str(e)
        else:
            raise AssertionError("an 8 MiB variable was accepted under a 1M limit")
        for part in ("variable_memory_max_size = 1048576 bytes", "takes 8388608 bytes",
                     "other variables hold 524288 bytes"):
            assert part in message, message
        assert npu_device.memory_stats()["variable_bytes"] == 512 << 10
        # Updates and reassignments of the small variable stay within the limit.
        small.assign_add(tf.ones([128 * 1024]))
        small.assign(small * 3.0)
        assert float(tf.reduce_sum(small)) == 3.0 * 128 * 1024
        assert npu_device.memory_stats()["variable_bytes"] == 512 << 10
        # Assignments in graphs are accounted the same way: within the limit they run, past it
        # they fail and the variable keeps its value.
        @tf.function
        def assign(v, n, value):
            v.assign(tf.fill([n], value))
        assign(small, 128 * 1024, 5.0)
        assert float(small[0]) == 5.0
        other = tf.Variable(tf.zeros([8]), shape=tf.TensorShape(None))   # may change shape
        try:
            assign(other, 512 * 1024, 1.0)       # 2 MiB
        except tf.errors.ResourceExhaustedError as e:
            assert "variable_memory_max_size = 1048576 bytes" in str(e), e
        else:
            raise AssertionError("a 2 MiB assignment was accepted under a 1M limit")
        assert other.numpy().shape == (8,) and float(tf.reduce_sum(other)) == 0.0
        # Variables that are freed leave the count (a traced function holds its variables);
        # without the limit big ones are fine.
        del small, other, assign
        gc.collect()
        assert npu_device.memory_stats()["variable_bytes"] == 0
        npu_device.set_npu_config(variable_memory_max_size=None)
        big = tf.Variable(tf.zeros([2 * 1024 * 1024]))
        assert npu_device.memory_stats()["variable_bytes"] == 8 << 20
        print("OK")
    """, timeout=TIMEOUT))


def test_variable_memory_max_size_from_the_environment_applies_to_keras():
    _ok(run_python("""
        import keras, numpy as np, tensorflow as tf
        import npu_device
        try:
            keras.layers.Dense(2048).build((None, 1024))          # an 8 MiB kernel
        except tf.errors.ResourceExhaustedError as e:
            assert "variable_memory_max_size" in str(e), e
        else:
            raise AssertionError("an 8 MiB Keras weight was accepted under a 1M limit")
        layer = keras.layers.Dense(64)
        layer.build((None, 256))                                  # 64 KiB: fits
        print("OK")
    """, env={"NPU_VARIABLE_MEMORY_MAX_SIZE": "1M"}, timeout=TIMEOUT))


# --- device_id ------------------------------------------------------------------------------


def test_device_id_is_checked_against_device_count_when_set():
    _ok(run_python("""
        import npu_device
        try:
            npu_device.set_npu_config(device_id=7)
        except ValueError as e:
            assert "device_id = 7" in str(e) and "0 to 0" in str(e), e
        else:
            raise AssertionError("device_id=7 accepted with one device")
        assert npu_device.get_npu_config()["device_id"] == 0
        npu_device.set_npu_config(device_count=8, device_id=7)   # together: fine
        assert npu_device.open().device_id == 7
        try:
            npu_device.set_npu_config(device_id=8)
        except ValueError as e:
            assert "from 0 to device_count - 1" in str(e), e
        else:
            raise AssertionError("device_id=8 accepted")
        print("OK")
    """, timeout=TIMEOUT))


def test_device_id_from_the_environment_is_checked_at_import():
    result = run_python("import npu_device", env={"NPU_DEVICE_ID": "7"}, timeout=TIMEOUT)
    assert result.returncode != 0
    assert "ValueError" in result.stderr and "device_id = 7" in result.stderr, result.stderr[-2000:]
    assert "0 to 0" in result.stderr and "NPU_DEVICE_COUNT" in result.stderr
    _ok(run_python("""
        import npu_device
        assert npu_device.open().device_id == 1
        print("OK")
    """, env={"NPU_DEVICE_ID": "1", "NPU_DEVICE_COUNT": "2"}, timeout=TIMEOUT))


# --- overflow_mode ----------------------------------------------------------------------------


def test_overflow_mode_option_drives_float16_overflow():
    _ok(run_python("""
        import numpy as np, tensorflow as tf
        import npu_device
        from npu_device import precision
        x = tf.constant([60000.0, 1.0], tf.float16)
        assert npu_device.get_npu_config()["overflow_mode"] == "inf_nan"   # the environment
        assert precision.overflow_mode() == "inf_nan"
        assert np.isinf((x * 2.0).numpy()[0])
        npu_device.set_npu_config(overflow_mode="saturation")
        assert precision.overflow_mode() == "saturation"
        assert (x * 2.0).numpy()[0] == 65504.0
        precision.set_overflow_mode("inf_nan")            # the same setting
        assert npu_device.get_npu_config()["overflow_mode"] == "inf_nan"
        assert np.isinf((x * 2.0).numpy()[0])
        npu_device.global_options().overflow_mode = "saturation"
        assert precision.overflow_mode() == "saturation"
        try:
            npu_device.set_npu_config(overflow_mode="wrap")
        except ValueError as e:
            assert "saturation, inf_nan" in str(e), e
        else:
            raise AssertionError("overflow_mode='wrap' accepted")
        assert precision.overflow_mode() == "saturation"
        print("OK")
    """, env={"NPU_OVERFLOW_MODE": "inf_nan"}, timeout=TIMEOUT))


# --- enable_graph_kernel --------------------------------------------------------------------

GRAPH_KERNEL = """
    import numpy as np, tensorflow as tf
    import npu_device
    from npu_device import compiler_bridge
    if {off}:
        npu_device.set_npu_config(enable_graph_kernel=False)
    f = tf.function(lambda a: tf.nn.relu(a * 2.0 + 1.0) * tf.tanh(a) - a)
    events = compiler_bridge.start_recording()
    y = f(tf.constant(np.linspace(-2, 2, 4096, dtype=np.float32).reshape(64, 64)))
    compiler_bridge.stop_recording(events)
    (model,) = [e for e in events if isinstance(e, compiler_bridge.ModelEvent)]
    (fuse,) = [p for p in model.passes if p["pass"] == "fuse_elementwise"]
    print("KERNELS", ",".join(model.kernels))
    print("PASS", fuse.get("skipped", "ran"))
    print("SUM", repr(float(tf.reduce_sum(y))))
    print("OK")
"""


def _graph_kernel(off):
    out = _ok(run_python(GRAPH_KERNEL.format(off=off), timeout=TIMEOUT)).stdout
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.splitlines()
            if line.split(" ", 1)[0] in ("KERNELS", "PASS", "SUM")}


def test_enable_graph_kernel_switches_elementwise_fusion():
    on, off = _graph_kernel(False), _graph_kernel(True)
    assert on["KERNELS"] == "NpuElementwise" and on["PASS"] == "ran"
    assert "NpuElementwise" not in off["KERNELS"] and len(off["KERNELS"].split(",")) == 6
    assert off["PASS"] == "switched off by enable_graph_kernel"
    assert on["SUM"] == off["SUM"]          # the fusion is bit-identical to the ops it replaces


# --- Ascend names without effect --------------------------------------------------------------


def test_ascend_options_without_effect_are_accepted_with_one_warning():
    result = _ok(run_python("""
        import npu_device
        from npu_device.configuration import options
        npu_device.set_npu_config(hcom_parallel=True, precision_mode="force_fp16")
        npu_device.set_npu_config(hcom_parallel=False)
        opts = npu_device.global_options()
        opts.graph_run_mode = 0
        opts.op_select_implmode = "high_precision"
        assert opts.hcom_parallel is False and opts.graph_run_mode == 0
        assert opts.stream_max_parallel_num is None          # never set
        assert "hcom_parallel" not in npu_device.get_npu_config()
        assert npu_device.get_npu_config()["precision_mode"] == "force_fp16"
        messages = {}
        for name in ("hcom_paralel", "no_such_option"):      # unknown names still raise
            try:
                npu_device.set_npu_config(**{name: 1})
            except TypeError as e:
                messages[name] = str(e)
            else:
                raise AssertionError(name + " accepted")
        assert "Did you mean 'hcom_parallel'?" in messages["hcom_paralel"], messages
        assert "Valid options:" in messages["no_such_option"], messages
        print("OK")
    """, timeout=TIMEOUT))
    warnings = [l for l in result.stderr.splitlines() if "has no effect on this backend" in l]
    assert len(warnings) == 3, warnings             # one per name, however often it is set
    assert any("'hcom_parallel'" in w and "collectives here are TensorFlow's" in w
               for w in warnings)


def test_every_ascend_name_without_effect_is_documented_with_its_reason():
    from npu_device.configuration import docs, options
    text = docs.render()
    for name, why in options.ASCEND_NO_EFFECT.items():
        assert f"| `{name}` | {why} |" in text.replace("\\|", "|")
        assert name not in options.BY_NAME


# --- quiet by default -----------------------------------------------------------------------

QUICKSTART = """
    import warnings
    import npu_device
    import keras, numpy as np, tensorflow as tf
    {before_fit}
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(128, 16)).astype(np.float32)
    y = (x.sum(axis=1) > 0).astype(np.int32)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(2)])
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=32, epochs=2, verbose=0)
    model.evaluate(x, y, verbose=0)
    tf.function(lambda a: tf.reduce_sum(a * 2.0))(tf.constant(x))
    warnings.warn("the user's own warning")
    tf.get_logger().warning("the user's own TF log line")
    print("OK")
"""

CONFIG_TABLE = "User's config has been changed based on plugin's config"


def test_quickstart_prints_no_plugin_config_tables():
    # TF's default log level, as a user running the quickstart has it.
    result = _ok(run_python(QUICKSTART.format(before_fit=""), env={"TF_CPP_MIN_LOG_LEVEL": "0"},
                            timeout=TIMEOUT))
    assert CONFIG_TABLE not in result.stderr, result.stderr[-3000:]
    assert "npu_device" not in result.stderr, result.stderr[-3000:]   # nothing of ours
    # The user's own warnings still show: nothing was silenced to get here.
    assert "the user's own warning" in result.stderr
    assert "the user's own TF log line" in result.stderr


def test_the_config_table_still_shows_when_the_user_turns_on_what_the_plugin_turns_off():
    # TF's table is right when the user's own optimizer setting really is overridden: it is
    # not hidden (the fix is that the plugin's config agrees with TF's defaults).
    result = _ok(run_python(QUICKSTART.format(
        before_fit='tf.config.optimizer.set_experimental_options({"remapping": True})'),
        env={"TF_CPP_MIN_LOG_LEVEL": "0"}, timeout=TIMEOUT))
    assert CONFIG_TABLE in result.stderr


@pytest.mark.parametrize("name", ["deterministic", "variable_memory_max_size", "device_id",
                                  "overflow_mode", "enable_graph_kernel"])
def test_documented_meaning_names_the_effect(name):
    # The option table's meaning is what these tests prove, not an aspiration.
    from npu_device.configuration import options
    words = {"deterministic": "bit-identical", "variable_memory_max_size": "ResourceExhaustedError",
             "device_id": "device_count", "overflow_mode": "65504",
             "enable_graph_kernel": "fuse_elementwise"}
    assert words[name] in options.BY_NAME[name].description
