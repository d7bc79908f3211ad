"""Options: validation, environment defaults, precedence, runtime limits, open(), generated docs.

Validation runs in-process on private Config instances (the process-wide one is left alone);
what depends on import order or on the native runtime runs in fresh interpreters."""
import json

import pytest

from npu_device.configuration import docs, options
from npu_device.configuration.state import Config
from tests.conftest import run_python

MIX = {"precision_mode": "allow_mix_precision"}
MIXLIST = {"white-list": {"to-add": ["MatMul"]}, "black-list": {"to-add": ["Softmax"]}}

# option -> ([(good value, canonical value or None to skip the check, options it needs)],
#            [bad values]). device_count and hbm_size size the runtime: good values are tested
# in fresh processes below.
CASES = {
    "fusion_switch_file": ([('{"ALL": "off", "simplify_algebra": "on"}',
                             {"ALL": "off", "simplify_algebra": "on"}, {})],
                           ["{not json", '["ALL"]', '{"no_such_pass": "off"}', '{"lower": "off"}',
                            '{"ALL": "maybe"}', "/nonexistent/switch.json", "", 5]),
    "dump_graph_path": ([("/tmp/ge_dumps", "/tmp/ge_dumps", {})], ["", "   ", 5, "a\0b"]),
    "precision_mode": ([("force_fp16", "force_fp16", {}),
                        ("allow_mix_precision_bf16", "allow_mix_precision_bf16", {})],
                       ["fp16", "FORCE_FP16", 3]),
    "precision_mode_v2": ([("mixed_float16", "mixed_float16", {}), (" origin ", "origin", {})],
                          ["force_fp16", "", True]),
    "modify_mixlist": ([(json.dumps(MIXLIST), {"black-list": {"to-add": ["Softmax"]},
                                               "white-list": {"to-add": ["MatMul"]}}, MIX)],
                       ["{not json", '["MatMul"]', '{"grey-list": {"to-add": ["MatMul"]}}',
                        '{"white-list": {"add": ["MatMul"]}}',
                        '{"white-list": {"to-add": "MatMul"}}',
                        '{"white-list": {"to-add": ["NoSuchOp"]}}']),
    "deterministic": ([(True, True, {}), ("0", False, {}), ("yes", True, {})], ["maybe", 2, 1.0]),
    "graph_memory_max_size": ([("8G", 8 << 30, {}), (64 << 20, 64 << 20, {}),
                               (" 1536M ", 3 << 29, {})],
                              ["8X", -1, 100, "G", 1.5, "1.5G", "8GiB"]),
    "variable_memory_max_size": ([("1G", 1 << 30, {})], ["lots", 0, "2048"]),
    "device_count": ([], [0, 9, "two", 1.0]),
    "hbm_size": ([], ["16 gigs", 1024, -1, "2T"]),
    # Ids above 0 need device_count > 1, which sizes the runtime: tested in fresh processes
    # (tests/test_options_effects.py).
    "device_id": ([(0, 0, {}), (" 0 ", 0, {})], [-1, 8, "one", True]),
    "overflow_mode": ([("inf_nan", "inf_nan", {}), (" saturation", "saturation", {})],
                      ["wrap", "INF_NAN", 1]),
    "enable_graph_kernel": ([(False, False, {}), ("1", True, {}), (0, False, {})],
                            ["sometimes", 2]),
    "iterations_per_loop": ([(1, 1, {}), ("1000", 1000, {})], [0, -5, 2.5, "ten"]),
    "enable_dump": ([(True, True, {"dump_path": "/tmp/d"})], ["sometimes"]),
    "dump_path": ([("~/dumps", None, {})], ["", "   ", 5]),
    "dump_step": ([("0|5|10-20", "0|5|10-20", {}), (" 3 - 4 | 7", "3-4|7", {}), (5, "5", {})],
                  ["3-1", "a", "1||2", "1-2-3", "-1", ""]),
    "dump_mode": ([("all", "all", {}), ("input", "input", {})], ["both"]),
    "enable_profiling": ([("on", True, {"profiling_dir": "/tmp/p"})], ["2"]),
    "profiling_dir": ([("/tmp/prof", "/tmp/prof", {})], [""]),
    "op_compiler_cache_mode": ([("force", "force", {}), ("disable", "disable", {})], ["on"]),
    "op_compiler_cache_dir": ([("/tmp/cache", "/tmp/cache", {})], [""]),
    "op_compiler_cache_max_size": ([("1G", 1 << 30, {}), ("512M", 512 << 20, {})],
                                   ["1000", 0, "big", "1.5G"]),
    "log_level": ([("debug", "debug", {}), ("error", "error", {})], ["verbose", "DEBUG"]),
    "log_compile_summary": ([(True, True, {}), ("false", False, {})], ["loud"]),
    "cpu_fallback": ([(True, True, {}), ("0", False, {})], ["sometimes", 2]),
    "compile_cache_size": ([(1, 1, {}), ("4096", 4096, {})], [0, -5, "many", 1.5]),
    "recompile_warning_threshold": ([(1, 1, {}), ("20", 20, {})], [0, "often"]),
    "max_value_specializations": ([(1, 1, {}), ("64", 64, {})], [0, "several"]),
}


def test_every_option_has_cases():
    assert set(CASES) == set(options.BY_NAME)


@pytest.mark.parametrize("name", sorted(CASES))
def test_good_values(name):
    for value, canonical, needs in CASES[name][0]:
        config = Config(environ={})
        config.set(**needs, **{name: value})
        got = config.values()[name]
        if canonical is not None:
            assert got == canonical
        if name == "dump_path":
            assert not got.startswith("~")  # expanded


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_values_name_option_and_allowed(name):
    option = options.BY_NAME[name]
    for value in CASES[name][1]:
        config = Config(environ={})
        with pytest.raises(ValueError) as err:
            config.set(**(MIX if name == "modify_mixlist" else {}), **{name: value})
        message = str(err.value)
        assert repr(name) in message and option.allowed in message, message
        assert config.values()[name] == Config(environ={}).values()[name]  # nothing changed


def test_choice_errors_suggest_the_closest_value():
    with pytest.raises(ValueError, match="did you mean 'allow_mix_precision'"):
        Config(environ={}).set(precision_mode="allow_mix_precison")


def test_unknown_option_is_type_error_with_suggestion_and_valid_names():
    with pytest.raises(TypeError) as err:
        Config(environ={}).set(precison_mode="force_fp16")
    message = str(err.value)
    assert "'precison_mode'" in message and "Did you mean 'precision_mode'?" in message
    assert all(name in message for name in options.BY_NAME)


def test_failed_call_changes_nothing():
    config = Config(environ={})
    with pytest.raises(ValueError):
        config.set(iterations_per_loop=4, dump_mode="sideways")
    assert config.values()["iterations_per_loop"] == 1


def test_none_resets_to_default():
    config = Config(environ={"NPU_DUMP_MODE": "all"})
    config.set(dump_mode="input")
    assert config.values()["dump_mode"] == "input"
    config.set(dump_mode=None)
    assert config.values()["dump_mode"] == "all"  # back to the environment's value


def test_precision_modes_are_mutually_exclusive():
    with pytest.raises(ValueError, match="mutually exclusive"):
        Config(environ={}).set(precision_mode="force_fp16", precision_mode_v2="fp16")
    config = Config(environ={})
    config.set(precision_mode="force_fp16")
    with pytest.raises(ValueError, match=r"precision_mode is already 'force_fp16'.*"
                                         r"precision_mode=None"):
        config.set(precision_mode_v2="fp16")
    config.set(precision_mode_v2="mixed_bfloat16", precision_mode=None)
    values = config.values()
    assert values["precision_mode"] is None and values["precision_mode_v2"] == "mixed_bfloat16"
    with pytest.raises(ValueError, match="mutually exclusive"):
        Config(environ={"NPU_PRECISION_MODE": "force_fp16",
                        "NPU_PRECISION_MODE_V2": "fp16"}).values()


def test_python_precision_overrides_the_other_name_from_environment():
    config = Config(environ={"NPU_PRECISION_MODE": "force_fp16"})
    config.set(precision_mode_v2="origin")
    assert config.snapshot().precision == "must_keep_origin_dtype"
    assert config.values()["precision_mode"] is None


def test_canonical_precision_and_fingerprint():
    def snap(**kw):
        config = Config(environ={})
        config.set(**kw)
        return config.snapshot()
    default = snap()
    assert default.precision == "must_keep_origin_dtype"
    assert snap(precision_mode="force_fp32").precision == "cube_fp16in_fp32out"
    assert snap(precision_mode_v2="mixed_float16").precision == "allow_mix_precision_fp16"
    # Same behaviour, same fingerprint; options that do not change graphs do not count.
    assert (snap(precision_mode="force_fp32").fingerprint
            == snap(precision_mode_v2="cube_fp16in_fp32out").fingerprint)
    assert snap(log_level="debug", dump_mode="all").fingerprint == default.fingerprint
    assert snap(deterministic=True).fingerprint != default.fingerprint
    assert snap(precision_mode="force_fp16").fingerprint != default.fingerprint
    assert (snap(**MIX, modify_mixlist=MIXLIST).fingerprint
            != snap(**MIX).fingerprint)


def test_snapshot_is_immutable_and_cached():
    config = Config(environ={})
    config.set(**MIX, modify_mixlist=MIXLIST)
    snap = config.snapshot()
    assert config.snapshot() is snap
    with pytest.raises(AttributeError, match="read-only"):
        snap.precision_mode = "force_fp16"
    with pytest.raises(TypeError):
        snap["precision_mode"] = "force_fp16"
    with pytest.raises(TypeError):
        snap.modify_mixlist["white-list"]["to-add"] = ("Conv2D",)
    assert snap.modify_mixlist["white-list"]["to-add"] == ("MatMul",)
    plain = snap.to_dict()  # what a JSON-minded consumer gets: a detached copy
    assert plain["precision"] == snap.precision == "allow_mix_precision_fp16"
    plain["modify_mixlist"]["white-list"]["to-add"].append("Conv2D")
    assert json.loads(json.dumps(plain)) == plain
    assert snap.to_dict()["modify_mixlist"]["white-list"]["to-add"] == ["MatMul"]
    config.set(iterations_per_loop=3)
    assert config.snapshot() is not snap and snap.iterations_per_loop == 1


def test_modify_mixlist_needs_a_mixed_mode(tmp_path):
    with pytest.raises(ValueError, match="only valid with a mixed precision mode"):
        Config(environ={}).set(modify_mixlist=MIXLIST)
    path = tmp_path / "mixlist.json"
    path.write_text(json.dumps(MIXLIST))
    config = Config(environ={})
    config.set(precision_mode_v2="mixed_float16", modify_mixlist=str(path))
    assert config.values()["modify_mixlist"]["white-list"] == {"to-add": ["MatMul"]}
    with pytest.raises(ValueError, match="only valid with a mixed precision mode"):
        config.set(precision_mode_v2="fp16")  # would strand the mixlist
    with pytest.raises(ValueError, match="only valid with a mixed precision mode"):
        Config(environ={"NPU_MODIFY_MIXLIST": json.dumps(MIXLIST)}).values()


def test_modify_mixlist_errors_are_specific(tmp_path):
    def error(value):
        with pytest.raises(ValueError) as err:
            Config(environ={}).set(**MIX, modify_mixlist=value)
        return str(err.value)
    assert "not valid JSON" in error('{"white-list": ')
    assert "neither JSON text nor a readable file" in error(str(tmp_path / "missing.json"))
    assert "did you mean 'MatMul'" in error('{"white-list": {"to-add": ["MatMull"]}}')
    assert "both white-list.to-add and black-list.to-add" in error(
        {"white-list": {"to-add": ["MatMul"]}, "black-list": {"to-add": ["MatMul"]}})
    assert "unknown list 'grey-list'" in error({"grey-list": {"to-add": ["MatMul"]}})


def test_companion_options_and_memory_limits():
    with pytest.raises(ValueError, match="enable_dump=True needs dump_path"):
        Config(environ={}).set(enable_dump=True)
    with pytest.raises(ValueError, match="enable_profiling=True needs profiling_dir"):
        Config(environ={}).set(enable_profiling=True)
    with pytest.raises(ValueError, match="in the environment"):
        Config(environ={"NPU_ENABLE_DUMP": "1"}).values()
    with pytest.raises(ValueError, match="exceeds the device memory hbm_size"):
        Config(environ={}).set(graph_memory_max_size="12G", variable_memory_max_size="5G")


def test_environment_gives_defaults_and_python_wins():
    config = Config(environ={"NPU_PRECISION_MODE": "force_fp16", "NPU_ITERATIONS_PER_LOOP": "5",
                             "NPU_DETERMINISTIC": "true", "NPU_DUMP_STEP": "1|3-4",
                             "NPU_LOG_LEVEL": ""})  # empty means unset
    values = config.values()
    assert (values["precision_mode"], values["iterations_per_loop"]) == ("force_fp16", 5)
    assert values["deterministic"] is True and values["dump_step"] == "1|3-4"
    assert values["log_level"] == "warning"
    config.set(iterations_per_loop=2, precision_mode="must_keep_origin_dtype")
    assert config.values()["iterations_per_loop"] == 2
    assert config.snapshot().precision == "must_keep_origin_dtype"


def test_invalid_environment_value_names_the_variable():
    with pytest.raises(ValueError, match=r"NPU_DUMP_STEP.*ends before it starts.*Allowed"):
        Config(environ={"NPU_DUMP_STEP": "9-2"}).values()


def test_environment_and_python_in_a_fresh_process():
    result = run_python("""
        import npu_device
        config = npu_device.get_npu_config()
        assert config["precision_mode"] == "force_fp16", config
        assert config["iterations_per_loop"] == 7, config
        npu_device.set_npu_config(iterations_per_loop=2)
        assert npu_device.get_npu_config()["iterations_per_loop"] == 2
        assert npu_device.configuration.current().iterations_per_loop == 2
        print("OK")
    """, env={"NPU_PRECISION_MODE": "force_fp16", "NPU_ITERATIONS_PER_LOOP": "7"})
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


def test_invalid_environment_fails_at_import_with_a_clear_error():
    result = run_python("import npu_device", env={"NPU_PRECISION_MODE": "fast"})
    assert result.returncode == 1
    assert "ValueError" in result.stderr and "NPU_PRECISION_MODE" in result.stderr
    assert "allow_mix_precision" in result.stderr  # lists the allowed values


def test_global_options_attribute_style():
    result = run_python("""
        import npu_device
        opts = npu_device.global_options()
        opts.precision_mode = "allow_mix_precision"
        opts.dump_step = "0|5|10-20"
        assert npu_device.get_npu_config()["precision_mode"] == "allow_mix_precision"
        assert opts.dump_step == "0|5|10-20"
        try:
            opts.precision_mode = "fastest"
        except ValueError as e:
            assert "force_fp16" in str(e)
        else:
            raise AssertionError("bad value accepted")
        try:
            opts.precison_mode = "force_fp16"
        except TypeError as e:
            assert "precision_mode" in str(e)
        else:
            raise AssertionError("unknown option accepted")
        assert not hasattr(opts, "no_such_option")
        assert opts.precision_mode == "allow_mix_precision"
        print("OK")
    """)
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


def test_device_sizes_set_before_the_devices_exist_take_effect():
    result = run_python("""
        import tensorflow as tf
        import npu_device
        from npu_device import _C
        npu_device.set_npu_config(device_count=3, hbm_size="1G")
        assert len(tf.config.list_physical_devices("NPU")) == 3
        assert len(tf.config.list_logical_devices("NPU")) == 3
        assert _C.get_config() == {"device_count": 3, "hbm_bytes": 1 << 30}
        with npu_device.open(2).scope():
            assert (tf.constant(1.0) + 1.0).device.endswith("/device:NPU:2")
        print("OK")
    """)
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


def test_device_count_cannot_change_once_the_device_exists():
    result = run_python("""
        import tensorflow as tf
        import npu_device
        assert len(tf.config.list_logical_devices("NPU")) == 2   # the runtime is up now
        npu_device.set_npu_config(device_count=2)                 # what it has: fine
        for name, value in (("device_count", 3), ("hbm_size", "1G")):
            try:
                npu_device.set_npu_config(**{name: value})
            except RuntimeError as e:
                assert "cannot take effect any more" in str(e), e
                assert "NPU_" + name.upper() in str(e), e
            else:
                raise AssertionError(name + " change accepted after init")
        assert npu_device.get_npu_config()["device_count"] == 2
        assert npu_device.get_npu_config()["hbm_size"] == 256 << 20
        print("OK")
    """, env={"NPU_DEVICE_COUNT": "2", "NPU_HBM_SIZE": "256M"})
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


def test_open_as_default_places_eager_ops_and_functions_on_the_npu():
    result = run_python("""
        import numpy as np
        import tensorflow as tf
        import npu_device
        dev = npu_device.open().as_default()
        assert dev.name.endswith("/device:NPU:0"), dev.name
        x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
        y = tf.matmul(x, x) + 1.0
        assert y.device.endswith("/device:NPU:0"), y.device
        np.testing.assert_allclose(y.numpy(), np.array([[8.0, 11.0], [16.0, 23.0]]), rtol=1e-2)
        v = tf.Variable(tf.ones([2]))
        assert v.device.endswith("/device:NPU:0"), v.device
        f = tf.function(lambda a: a * 3.0)
        assert f(x).device.endswith("/device:NPU:0")
        with tf.device("/CPU:0"):                         # explicit scopes still win
            assert (x + 1.0).device.endswith("/device:CPU:0")
        try:
            npu_device.open(5)
        except ValueError as e:
            assert "valid ids are 0..0" in str(e), e
        else:
            raise AssertionError("open(5) accepted with one device")
        print("OK")
    """)
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


def test_open_selects_the_device_id_option_on_two_devices():
    result = run_python("""
        import tensorflow as tf
        import npu_device
        dev = npu_device.open().as_default()           # NPU_DEVICE_ID=1
        assert dev.device_id == 1
        assert (tf.constant([1.0]) * 2.0).device.endswith("/device:NPU:1")
        with npu_device.open(0).scope():
            assert (tf.constant([1.0]) * 2.0).device.endswith("/device:NPU:0")
        with tf.device("/CPU:0"):
            try:
                npu_device.open(0).as_default()
            except RuntimeError as e:
                assert "outside any `with tf.device" in str(e)
            else:
                raise AssertionError("as_default() inside a device scope accepted")
        print("OK")
    """, env={"NPU_DEVICE_COUNT": "2", "NPU_DEVICE_ID": "1"})
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


def test_docs_are_up_to_date():
    with open(docs.DOC_PATH) as f:
        assert f.read() == docs.render(), \
            "docs/options.md is stale: run `python -m npu_device.configuration.docs`"


@pytest.mark.parametrize("name,bad,says", [
    ("NPU_NUM_THREADS", "four", "'four' is not an integer"),
    ("NPU_NUM_THREADS", "0", "0 is out of range"),
    ("NPU_KERNEL_ISA", "avx512", "'avx512' is not an allowed value"),
    ("NPU_LOG_EAGER_FALLBACK", "maybe", "'maybe' is not a boolean"),
])
def test_a_bad_process_setting_fails_at_import_with_the_allowed_values(name, bad, says):
    r = run_python("import npu_device", env={name: bad}, timeout=120)
    assert r.returncode != 0
    message = r.stderr.strip().splitlines()[-1]
    assert message.startswith(f"ValueError: invalid value for environment variable {name}"), message
    assert says in message and "Allowed:" in message, message


def test_process_settings_parse_as_the_runtime_reads_them():
    from npu_device.configuration import environment
    assert environment.value("NPU_NUM_THREADS", {"NPU_NUM_THREADS": " 3 "}) == 3
    assert environment.value("NPU_NUM_THREADS", {"NPU_NUM_THREADS": ""}) is None   # unset
    assert environment.value("NPU_KERNEL_ISA", {}) is None
    assert environment.value("NPU_LOG_EAGER_FALLBACK", {"NPU_LOG_EAGER_FALLBACK": "off"}) is False
