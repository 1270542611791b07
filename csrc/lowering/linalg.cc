#include "helpers.h"

namespace torch_tpu::lowering {

void register_linalg(Registry& r) { (void)r; }

}  // namespace torch_tpu::lowering
