// Where an op came from in the user's Python code ("file.py:12"), for error
// messages and recompilation warnings.
#pragma once

#include <string>

namespace torch_tpu::aten {

// The site of the running op: interned (one pointer per distinct site, so
// pointers compare as sites), valid for the life of the
// process ("" off the Python thread). Memoized by the chain of (code, line)
// frames it was read from, so a loop pays for the walk, not for formatting.
const std::string* python_site();

}  // namespace torch_tpu::aten
