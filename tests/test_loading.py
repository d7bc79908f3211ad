"""Getting the plugin into TensorFlow: import orders, loading it twice, a missing or broken
library. Every scenario runs in a fresh interpreter, since a failed load could abort it."""
import os
import shutil
import subprocess
import textwrap

import pytest

from conftest import run_python
from npu_device import _loader

PLUGIN = next(p for p in _loader.plugin_candidates() if os.path.isfile(p))
# An installed plugin (site-packages/tensorflow-plugins) is loaded by `import tensorflow` itself,
# so npu_device's own loading path, and what can go wrong on it, does not come into play.
AUTO_LOADED = bool(_loader.installed_plugins())
own_loading_path = pytest.mark.skipif(
    AUTO_LOADED, reason="TensorFlow auto-loads the installed plugin; npu_device loads nothing")
ALREADY_LOADED = ("npu_device: the NPU plugin is already loaded in this process; not loading it "
                  "twice")

# Runs a tiny op on the NPU and reports where it ran and the NPU bytes it took.
USE_NPU = """
import numpy as np
import tensorflow as tf
from npu_device import _C
with tf.device("/NPU:0"):
    x = tf.constant(np.arange(16, dtype=np.float32))
print(x.device, x.numpy().sum(), _C.memory_stats(0)["in_use"])
"""
NPU_WORKS = "/job:localhost/replica:0/task:0/device:NPU:0 120.0 64"

# Imports npu_device._loader without running the package's __init__ (which would load the
# plugin), so the loader can be pointed elsewhere first.
BARE_LOADER = """
import importlib.util, sys, types
package = types.ModuleType("npu_device")
package.__path__ = list(importlib.util.find_spec("npu_device").submodule_search_locations)
sys.modules["npu_device"] = package
from npu_device import _loader
"""


def run(*parts, env=None):
    """Runs the code pieces (each dedented on its own) in a fresh interpreter; must exit 0."""
    result = run_python("\n".join(textwrap.dedent(part) for part in parts), env=env)
    assert result.returncode == 0, result.stderr
    return result


def test_import_npu_device_first():
    out = run("import npu_device", USE_NPU, "print(_C.plugin_registered())").stdout
    assert out.splitlines() == [NPU_WORKS, "True"]


def test_import_tensorflow_first():
    out = run("import tensorflow as tf\nimport npu_device", USE_NPU).stdout
    assert out.splitlines() == [NPU_WORKS]


@own_loading_path
def test_tensorflow_op_before_import_warns_and_runs_on_cpu():
    result = run("""
        import warnings
        import tensorflow as tf
        tf.constant(1.0) + 1.0          # initializes TensorFlow's eager context
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import npu_device
        print([str(w.message) for w in caught if w.category is RuntimeWarning])
        from npu_device import _C
        print(_C.plugin_registered(), tf.config.list_logical_devices("NPU"))
    """)
    warning, state = result.stdout.splitlines()
    assert "TensorFlow's eager context was initialized before npu_device was imported" in warning
    assert "Import npu_device before running any TensorFlow op" in warning
    assert state == "False []"


def test_loading_the_plugin_again_is_refused():
    result = run(f"""
        import npu_device
        from tensorflow.python.framework import load_library
        try:
            load_library.load_pluggable_device_library({PLUGIN!r})
        except RuntimeError as e:
            print(e)
    """, USE_NPU)
    assert result.stdout.splitlines() == [ALREADY_LOADED, NPU_WORKS]


@own_loading_path
def test_plugin_from_tf_pluggable_device_library_path_is_not_loaded_twice():
    env = {"TF_PLUGGABLE_DEVICE_LIBRARY_PATH": PLUGIN}
    out = run("import npu_device", USE_NPU, env=env).stdout   # TF loads it; npu_device not
    assert out.splitlines() == [NPU_WORKS]
    result = run(f"""
        import tensorflow
        from tensorflow.python.framework import load_library
        try:
            load_library.load_pluggable_device_library({PLUGIN!r})
        except RuntimeError as e:
            print(e)
    """, env=env)
    assert result.stdout.splitlines() == [ALREADY_LOADED]


def test_two_copies_on_tf_pluggable_device_library_path_fail_import_cleanly(tmp_path):
    # Like an installed plugin plus another build named by the environment variable: two
    # distinct copies of the library, one shared runtime (found here via LD_LIBRARY_PATH).
    for name in ("libnpu_plugin_a.so", "libnpu_plugin_b.so"):
        shutil.copy(PLUGIN, tmp_path / name)
    result = run("""
        try:
            import tensorflow
        except RuntimeError as e:
            print(e)
    """, env={"TF_PLUGGABLE_DEVICE_LIBRARY_PATH": str(tmp_path),
              "LD_LIBRARY_PATH": os.path.dirname(PLUGIN)})
    assert result.stdout.splitlines() == [ALREADY_LOADED]


@own_loading_path
def test_missing_plugin_raises_import_error():
    result = run(BARE_LOADER, """
        _loader.plugin_candidates = lambda: ["/nonexistent/libnpu_plugin.so"]
        try:
            _loader.load_plugin()
        except ImportError as e:
            print(e)
    """)
    message = result.stdout.strip()
    assert message.startswith("npu_device: the NPU plugin libnpu_plugin.so was not found "
                              "(looked in: /nonexistent/libnpu_plugin.so).")
    assert "pip install --no-build-isolation ." in message


@own_loading_path
def test_broken_plugin_raises_import_error(tmp_path):
    broken = tmp_path / "libnpu_plugin.so"
    broken.write_bytes(b"not a shared library")
    result = run(BARE_LOADER, f"""
        _loader.plugin_candidates = lambda: [{str(broken)!r}]
        try:
            _loader.load_plugin()
        except ImportError as e:
            print(e)
        import tensorflow as tf
        print(tf.config.list_logical_devices("NPU"))
    """)
    message, devices = result.stdout.splitlines()
    assert message.startswith(f"npu_device: cannot load the NPU plugin {broken}: ")
    assert "cmake --build" in message
    assert devices == "[]"


def test_missing_native_bridge_raises_import_error(tmp_path):
    shutil.copy(_loader.__file__, tmp_path / "_loader.py")   # a package without _C
    result = run(f"""
        import sys, types
        package = types.ModuleType("npu_device")
        package.__path__ = [{str(tmp_path)!r}]
        sys.modules["npu_device"] = package
        from npu_device import _loader
        try:
            _loader.load_plugin()
        except ImportError as e:
            print(e)
    """)
    assert result.stdout.startswith("npu_device: the native bridge npu_device._C could not be "
                                    "imported (")


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
def test_plugin_exports_only_its_entry_points():
    symbols = subprocess.run(["nm", "-D", "--defined-only", PLUGIN], capture_output=True,
                             text=True, check=True).stdout.split()
    plain_c = {s for s in symbols if s.isidentifier() and s.startswith(("SE_", "TF_", "npurt"))}
    assert "SE_InitPlugin" in plain_c
    assert plain_c <= {"SE_InitPlugin", "TF_InitKernel", "TF_InitGraph", "TF_InitProfiler"}
