"""Run a function on a module right after its first import, without importing
it earlier: torch_tpu configures parts of PyTorch (Dynamo's default backend,
Inductor's code generator for `tpu`) that take seconds to import and that
many scripts never use."""
import importlib.abc
import importlib.util
import sys


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name, then):
        self.name = name
        self.then = then

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then(module):
            exec_module(module)
            self.then(module)

        spec.loader.exec_module = exec_then
        return spec


def after_import(name, then):
    """Calls `then(module)` once module `name` is imported: now if it already
    is, else right after its first import. Installing twice for one name and
    function is a no-op."""
    module = sys.modules.get(name)
    if module is not None:
        then(module)
    elif not any(isinstance(f, _AfterImport) and f.name == name and f.then is then
                 for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, then))
