#include "site.h"

#include <Python.h>
#include <frameobject.h>

#include <cstring>

namespace torch_tpu::aten {

namespace {
// Frames inside torch or torch_tpu say nothing about the user's code.
bool library_frame(const char* file) {
  return std::strstr(file, "/torch/") != nullptr || std::strstr(file, "/torch_tpu/") != nullptr ||
         std::strstr(file, "<frozen") != nullptr;
}
// The first frame outside torch and torch_tpu (GIL held).
std::string innermost_user_site() {
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  if (frame == nullptr) return {};
  Py_INCREF(frame);
  std::string site;
  for (int depth = 0; frame != nullptr && depth < 32; ++depth) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    if (file != nullptr && (site.empty() || !library_frame(file))) {
      site = std::string(file) + ":" + std::to_string(PyFrame_GetLineNumber(frame));
      if (!library_frame(file)) {
        Py_DECREF(code);
        Py_DECREF(frame);
        return site;
      }
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  if (PyErr_Occurred()) PyErr_Clear();
  return site;  // the innermost frame when all are library frames
}

}  // namespace

std::string python_site() {
  // Only threads that run Python (PyTorch releases the GIL around ops); the
  // autograd engine's threads have no Python frames to report.
  if (!Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) return {};
  PyGILState_STATE gil = PyGILState_Ensure();
  std::string site = innermost_user_site();
  PyGILState_Release(gil);
  return site;
}


}  // namespace torch_tpu::aten
