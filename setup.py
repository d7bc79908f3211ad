"""Builds npu_device: the Python packages plus the native libraries (CMake, see CMakeLists.txt).

The native code is compiled against the TensorFlow wheel that is installed in the build
environment, so install with `pip install --no-build-isolation .` after `tensorflow==2.21.*`.
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
PLUGIN_NAME = "libnpu_plugin.so"


class CMakeBuild(build_ext):
    """Runs CMake once for all native targets and places the results.

    In-tree (editable) builds leave everything in npu_device/_lib/. A regular install also puts
    the plugin into site-packages/tensorflow-plugins/, where a plain `import tensorflow` loads it.
    """

    def run(self):
        build_dir = os.path.join(ROOT, "build", "cmake")
        os.makedirs(build_dir, exist_ok=True)
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir, *generator,
                               f"-DPython3_EXECUTABLE={sys.executable}"])
        jobs = str(os.cpu_count() or 2)
        subprocess.check_call(["cmake", "--build", build_dir, "--parallel", jobs])
        if self.inplace:
            return
        lib_src = os.path.join(ROOT, "npu_device", "_lib")
        lib_dst = os.path.join(self.build_lib, "npu_device", "_lib")
        os.makedirs(lib_dst, exist_ok=True)
        for name in os.listdir(lib_src):
            if name.endswith(".so") and name != PLUGIN_NAME:
                shutil.copy2(os.path.join(lib_src, name), lib_dst)
        plugin_dst = os.path.join(self.build_lib, "tensorflow-plugins")
        os.makedirs(plugin_dst, exist_ok=True)
        shutil.copy2(os.path.join(lib_src, PLUGIN_NAME), plugin_dst)
        bridge = self.get_ext_filename("npu_device._C")
        shutil.copy2(os.path.join(ROOT, bridge), os.path.join(self.build_lib, bridge))

    def get_outputs(self):
        return []


setup(
    name="npu_device",
    version="0.1.0",
    description="TensorFlow 2 adapter that runs unmodified TF/Keras programs on an NPU",
    packages=find_packages(include=["npu_device", "npu_device.*", "graph_engine", "graph_engine.*"]),
    package_data={"graph_engine": ["ops/*.json"]},
    ext_modules=[Extension("npu_device._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.10",
    install_requires=["tensorflow==2.21.*", "numpy", "absl-py", "tensorflow-serving-api==2.21.*",
                      "cheroot>=10", "scipy"],
    extras_require={"test": ["pytest"]},
    entry_points={"console_scripts": [
        "npu-atc=npu_device.serving.atc:main",
        "npu-model-server=npu_device.serving.model_server:main",
    ]},
)
