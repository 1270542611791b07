#include "conv_family.h"

namespace torch_tpu::lowering {

void register_pool(Registry& r) { (void)r; }

}  // namespace torch_tpu::lowering
