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
}  // namespace

std::string python_site() {
  if (!Py_IsInitialized() || !PyGILState_Check()) return {};
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

}  // namespace torch_tpu::aten
