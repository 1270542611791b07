#include "site.h"

#include <Python.h>
#include <frameobject.h>

#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

namespace torch_tpu::aten {

namespace {

// The tables below are read and written with the GIL held. Code objects seen
// are kept alive (one reference each) so that their addresses stay theirs.
struct CodeInfo {
  std::string file;
  bool library;  // inside torch or torch_tpu: says nothing about the user's code
};

CodeInfo& code_info(PyCodeObject* code) {
  static std::unordered_map<PyCodeObject*, CodeInfo> infos;
  auto it = infos.find(code);
  if (it != infos.end()) return it->second;
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  if (file == nullptr) {
    PyErr_Clear();
    file = "?";
  }
  bool library = std::strstr(file, "/torch/") != nullptr ||
                 std::strstr(file, "/torch_tpu/") != nullptr ||
                 std::strstr(file, "<frozen") != nullptr;
  Py_INCREF(code);
  return infos.emplace(code, CodeInfo{file, library}).first->second;
}

struct ChainHash {
  size_t operator()(const std::vector<uintptr_t>& v) const {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (uintptr_t w : v) h = (h ^ w) * 0x100000001B3ull;
    return static_cast<size_t>(h ^ (h >> 31));
  }
};

const std::string* empty_site() {
  static const std::string empty;
  return &empty;
}

// The first frame outside torch and torch_tpu, or the innermost frame when
// all are library frames (GIL held).
const std::string* innermost_user_site() {
  // Call chains to sites, and one string per distinct site: ops reached
  // through different library lines of one user line share its pointer.
  static std::unordered_map<std::vector<uintptr_t>, const std::string*, ChainHash> sites;
  static std::unordered_map<std::string, std::unique_ptr<std::string>> texts;
  static std::vector<uintptr_t> chain;  // (code, instruction) pairs walked
  chain.clear();
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  if (frame == nullptr) return empty_site();
  Py_INCREF(frame);
  const CodeInfo* innermost = nullptr;
  const CodeInfo* user = nullptr;
  PyCodeObject *innermost_code = nullptr, *user_code = nullptr;
  int innermost_at = 0, user_at = 0;
  for (int depth = 0; frame != nullptr && depth < 32 && user == nullptr; ++depth) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    const CodeInfo& info = code_info(code);
    Py_DECREF(code);
    int at = PyFrame_GetLasti(frame);
    chain.push_back(reinterpret_cast<uintptr_t>(code));
    chain.push_back(static_cast<uintptr_t>(at));
    if (innermost == nullptr) innermost = &info, innermost_code = code, innermost_at = at;
    if (!info.library) user = &info, user_code = code, user_at = at;
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  if (PyErr_Occurred()) PyErr_Clear();
  auto it = sites.find(chain);
  if (it != sites.end()) return it->second;
  if (user == nullptr) user = innermost, user_code = innermost_code, user_at = innermost_at;
  // The line is worked out once per site: a hit compares instruction offsets.
  int line = PyCode_Addr2Line(user_code, user_at);
  std::string text = user->file + ":" + std::to_string(line);
  std::unique_ptr<std::string>& site = texts[text];
  if (!site) site = std::make_unique<std::string>(std::move(text));
  return sites.emplace(chain, site.get()).first->second;
}

}  // namespace

const std::string* python_site() {
  // Only threads that run Python (PyTorch releases the GIL around ops); the
  // autograd engine's threads have no Python frames to report.
  if (!Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) return empty_site();
  PyGILState_STATE gil = PyGILState_Ensure();
  const std::string* site = innermost_user_site();
  PyGILState_Release(gil);
  return site;
}

}  // namespace torch_tpu::aten
