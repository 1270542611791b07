#include "conv_family.h"

namespace torch_tpu::lowering {

void register_upsample(Registry& r) { (void)r; }

}  // namespace torch_tpu::lowering
