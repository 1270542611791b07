#include "helpers.h"

namespace torch_tpu::lowering {

void register_factory(Registry& r) { (void)r; }

}  // namespace torch_tpu::lowering
