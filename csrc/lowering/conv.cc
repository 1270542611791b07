#include "helpers.h"

namespace torch_tpu::lowering {

void register_conv(Registry& r) { (void)r; }

}  // namespace torch_tpu::lowering
