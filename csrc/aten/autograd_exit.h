// Lets PyTorch's autograd device threads finish with their last graph task
// before the interpreter shuts down (see torch_tpu/_autograd_exit.py for the
// failure it prevents).
#pragma once

namespace torch_tpu::aten {

// Passes one trivial backward through the autograd device thread of every
// tpu device. The graph is built in C++: no Python object, and no tpu
// program (the only node is a view's backward). Call without the GIL.
void drain_autograd_device_threads();

}  // namespace torch_tpu::aten
