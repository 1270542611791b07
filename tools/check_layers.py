#!/usr/bin/env python3
"""Fails when a C++ file includes a header of a layer it may not know.

    python tools/check_layers.py [csrc]

The layers of csrc/ depend one way (docs/design.md, Layers): each folder may
include its own headers and those of the folders listed for it below, and the
torch-free layers include no torch, ATen, c10, pybind11 or Python header. The
build runs this before compiling (CMakeLists.txt, target `check_layers`), so a
wrong-way include fails the build with the file, line and include named.
Only the standard library is used: CMake runs it with any Python 3.
"""
import os
import re
import sys

# folder -> the other csrc folders whose headers it may include.
ALLOWED = {
    "pjrt": set(),
    "hlo": set(),
    "lowering": {"hlo"},
    "engine": {"pjrt", "hlo", "lowering"},
    "aten": {"pjrt", "hlo", "lowering", "engine"},
    "distributed": {"pjrt", "hlo", "lowering", "engine", "aten"},
    "profiler": {"pjrt", "hlo", "lowering", "engine"},
    "python": {"pjrt", "hlo", "lowering", "engine", "aten", "distributed", "profiler"},
}
# Layers that know nothing of torch (nor of Python).
TORCH_FREE = {"pjrt", "hlo", "lowering", "engine"}
TORCH_HEADERS = re.compile(r"(torch|ATen|c10|caffe2|pybind11)/|Python\.h$")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def violations(csrc):
    """(file, line number, include, why) for every wrong-way include under csrc."""
    found = []
    csrc = os.path.abspath(csrc)
    for layer in sorted(os.listdir(csrc)):
        folder = os.path.join(csrc, layer)
        if not os.path.isdir(folder):
            continue
        if layer not in ALLOWED:
            found.append((folder, 0, "", f"folder csrc/{layer} has no entry in "
                          "tools/check_layers.py ALLOWED: say which layers it may include"))
            continue
        for name in sorted(os.listdir(folder)):
            if not name.endswith((".h", ".cc")):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m:
                        why = _wrong(csrc, folder, layer, m.group(1), m.group(2))
                        if why:
                            found.append((path, number, m.group(2), why))
    return found


def _wrong(csrc, folder, layer, quote, header):
    if layer in TORCH_FREE and TORCH_HEADERS.search(header):
        return f"csrc/{layer} knows nothing of torch or Python"
    if quote != '"':
        return None
    target = os.path.normpath(os.path.join(folder, header))
    if not target.startswith(csrc + os.sep):
        return None  # outside csrc (e.g. pjrt_c_api.h)
    other = os.path.relpath(target, csrc).split(os.sep)[0]
    if other == layer or other in ALLOWED[layer]:
        return None
    if not ALLOWED[layer]:
        return f"csrc/{layer} includes no other layer, not csrc/{other}"
    return f"csrc/{layer} may include only {', '.join(sorted(ALLOWED[layer]))}, not csrc/{other}"


def main(argv):
    csrc = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "csrc")
    found = violations(csrc)
    for path, number, header, why in found:
        where = f"{os.path.relpath(path)}:{number}" if number else os.path.relpath(path)
        print(f"{where}: wrong-way include \"{header}\": {why}" if header else f"{where}: {why}",
              file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
