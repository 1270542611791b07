"""Builds torch_tpu: the C++ core through CMake into torch_tpu/_C.

Install with `pip install -e . --no-build-isolation` so the build sees the
torch already installed (build isolation would fetch a multi-GB CUDA torch).
"""
import os
import subprocess
import sys
import sysconfig

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


def pjrt_include_dir():
    import xla_plugins.xla_cpu_pjrt as plugin

    return os.path.join(os.path.dirname(plugin.__file__), "include")


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        import torch
        from torch.utils import cpp_extension

        root = os.path.dirname(os.path.abspath(__file__))
        build_dir = os.path.join(root, "build", "cmake")
        os.makedirs(build_dir, exist_ok=True)
        out = os.path.abspath(self.get_ext_fullpath(ext.name))
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        config = [
            "cmake", "-S", root, "-B", build_dir, "-G", "Ninja",
            f"-DPJRT_INCLUDE_DIR={pjrt_include_dir()}",
            f"-DTORCH_INCLUDE_DIRS={';'.join(cpp_extension.include_paths())}",
            f"-DTORCH_LIBRARY_DIR={os.path.join(os.path.dirname(torch.__file__), 'lib')}",
            f"-DPYTHON_INCLUDE_DIR={sysconfig.get_paths()['include']}",
            f"-DTORCH_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f"-DPYTHON_EXTENSION_SUFFIX={suffix}",
        ]
        subprocess.check_call(config)
        jobs = os.environ.get("TORCH_TPU_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", build_dir, "-j", jobs])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        self.copy_file(os.path.join(build_dir, "_C" + suffix), out)


setup(
    name="torch_tpu",
    version="0.1.0",
    description="PyTorch on TPUs and every PJRT device, eager first",
    packages=find_packages(include=["torch_tpu", "torch_tpu.*"]),
    ext_modules=[CMakeExtension("torch_tpu._C")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.10",
    install_requires=["torch>=2.11,<2.14", "xla-cpu-pjrt", "numpy"],
    # JAX authors kernels (torch.tpu.pallas.jax_op) and runs Inductor's
    # Pallas code path; kernel files and the runtime never import it.
    extras_require={"pallas": ["jax==0.10.2", "jaxlib==0.10.2"]},
    entry_points={
        "torch.backends": ["tpu = torch_tpu:_autoload"],
        "torch_dynamo_backends": ["tpu = torch_tpu.compiler:tpu_backend"],
        # vLLM finds the tpu platform here (torch_tpu/vllm).
        "vllm.platform_plugins": ["tpu = torch_tpu.vllm:register"],
    },
)
