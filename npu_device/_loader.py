"""Loads the NPU PluggableDevice plugin into TensorFlow, once, before TensorFlow needs devices.

Two ways the plugin gets in:
  * an installed package ships it as site-packages/tensorflow-plugins/libnpu_plugin.so, which
    `import tensorflow` loads by itself;
  * in-tree and editable builds leave it in npu_device/_lib/, and this module loads it.
Loading it a second time would abort TensorFlow, so the runtime remembers the registration
(`_C.plugin_registered()`) and nothing is loaded twice. Loading it after TensorFlow's eager
context exists would leave NPU a physical device only, with every op silently on CPU, so that
is refused with a warning instead.
"""
import os
import site
import warnings

PLUGIN_NAME = "libnpu_plugin.so"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_REBUILD_HINT = (
    "Rebuild the native libraries in-tree (cmake -S . -B build/cmake -G Ninja && "
    "cmake --build build/cmake) or reinstall the package (pip install --no-build-isolation .).")


def installed_plugins():
    """Plugins in site-packages/tensorflow-plugins, which `import tensorflow` loads by itself."""
    dirs = dict.fromkeys(site.getsitepackages() + [site.getusersitepackages()])
    paths = (os.path.join(d, "tensorflow-plugins", PLUGIN_NAME) for d in dirs)
    return [p for p in paths if os.path.isfile(p)]


def plugin_candidates():
    """Where the plugin may be, in order: the in-tree build, then the installed locations."""
    return [os.path.join(_PACKAGE_DIR, "_lib", PLUGIN_NAME)] + installed_plugins()


def _bridge():
    try:
        from npu_device import _C
    except ImportError as e:
        raise ImportError(
            f"npu_device: the native bridge npu_device._C could not be imported ({e}). "
            + _REBUILD_HINT) from e
    return _C


def _eager_context_initialized():
    from tensorflow.python.eager import context
    return context.context()._initialized  # pylint: disable=protected-access


def load_plugin():
    """Makes sure the NPU platform is registered with TensorFlow; returns whether it is.

    Raises ImportError when the plugin is missing or cannot be loaded. Never loads it twice.
    """
    _C = _bridge()
    import tensorflow  # noqa: F401  (an installed plugin is auto-loaded here)
    if _C.plugin_registered():
        return True
    if _eager_context_initialized():
        warnings.warn(
            "npu_device: TensorFlow's eager context was initialized before npu_device was "
            "imported (a TensorFlow op ran or devices were listed), so the NPU plugin was not "
            "loaded and everything runs on CPU. Import npu_device before running any "
            "TensorFlow op, or install the package so that `import tensorflow` loads the "
            "plugin itself.", RuntimeWarning, stacklevel=2)
        return False
    path = next((p for p in plugin_candidates() if os.path.isfile(p)), None)
    if path is None:
        raise ImportError(
            f"npu_device: the NPU plugin {PLUGIN_NAME} was not found (looked in: "
            + ", ".join(plugin_candidates()) + "). " + _REBUILD_HINT)
    from tensorflow.python.framework import load_library
    try:
        load_library.load_pluggable_device_library(path)
    except Exception as e:  # TF raises OSError, NotFoundError or RuntimeError here
        raise ImportError(f"npu_device: cannot load the NPU plugin {path}: {e}. "
                          + _REBUILD_HINT) from e
    return True

