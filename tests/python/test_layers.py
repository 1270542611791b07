"""The one-way layering of csrc/ (tools/check_layers.py, run by the build)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK = os.path.join(ROOT, "tools", "check_layers.py")


def run(csrc):
    return subprocess.run([sys.executable, CHECK, str(csrc)], capture_output=True, text=True)


def tree(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / "csrc" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for layer in ("pjrt", "hlo", "lowering", "engine", "aten", "python"):
        (tmp_path / "csrc" / layer).mkdir(parents=True, exist_ok=True)
    return tmp_path / "csrc"


def test_the_source_tree_has_no_wrong_way_include():
    r = run(os.path.join(ROOT, "csrc"))
    assert r.returncode == 0, r.stderr


def test_one_way_includes_pass(tmp_path):
    csrc = tree(tmp_path, {
        "hlo/builder.h": '#include <vector>\n#include "types.h"\n',
        "lowering/nn.cc": '#include "../hlo/builder.h"\n#include "helpers.h"\n',
        "engine/engine.cc": '#include "../pjrt/client.h"\n#include "../lowering/registry.h"\n',
        "aten/kernel.cc": '#include <ATen/ATen.h>\n#include "../engine/engine.h"\n',
        "python/module.cc": '#include <Python.h>\n#include "../aten/dispatch.h"\n',
    })
    r = run(csrc)
    assert r.returncode == 0, r.stderr


def test_a_wrong_way_include_names_file_line_and_include(tmp_path):
    csrc = tree(tmp_path, {
        "lowering/nn.cc": '#include "../hlo/builder.h"\n  #  include "../pjrt/client.h"\n',
        "hlo/builder.cc": '#include "../engine/engine.h"\n',
        "engine/engine.cc": '#include "../aten/storage.h"\n',
    })
    r = run(csrc)
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert len(lines) == 3, r.stderr
    assert any("nn.cc:2" in l and '"../pjrt/client.h"' in l and "csrc/lowering may include only hlo"
               in l for l in lines), r.stderr
    assert any("builder.cc:1" in l and "csrc/hlo includes no other layer, not csrc/engine"
               in l for l in lines), r.stderr
    assert any("engine.cc:1" in l and "not csrc/aten" in l for l in lines), r.stderr


def test_torch_free_layers_include_no_torch_header(tmp_path):
    csrc = tree(tmp_path, {
        "pjrt/api.cc": "#include <c10/util/Exception.h>\n",
        "engine/cache.cc": "#include <torch/library.h>\n",
        "hlo/types.cc": "#include <Python.h>\n",
        "aten/ok.cc": "#include <torch/library.h>\n",
    })
    r = run(csrc)
    assert r.returncode == 1
    assert "api.cc:1" in r.stderr and "csrc/pjrt knows nothing of torch" in r.stderr
    assert "cache.cc:1" in r.stderr and "csrc/engine knows nothing of torch" in r.stderr
    assert "types.cc:1" in r.stderr
    assert "ok.cc" not in r.stderr


def test_a_new_folder_must_be_given_its_layer(tmp_path):
    csrc = tree(tmp_path, {"kernels/x.cc": "int x;\n"})
    r = run(csrc)
    assert r.returncode == 1 and "csrc/kernels has no entry" in r.stderr
