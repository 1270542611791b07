// Where an op came from in the user's Python code ("file.py:12"), for error
// messages and recompilation warnings. Empty off the Python thread.
#pragma once

#include <string>

namespace torch_tpu::aten {

std::string python_site();

}  // namespace torch_tpu::aten
