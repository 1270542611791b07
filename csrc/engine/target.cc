#include "target.h"

#include <cstdlib>
#include <cstring>

namespace torch_tpu::engine {

hlo::Target make_target(const pjrt::Client& client, hlo::HalfConvQuery cpu_half_conv) {
  int bf16_dots = -1;
  if (const char* v = std::getenv("TORCH_TPU_BF16_DOTS"); v != nullptr && *v != '\0')
    bf16_dots = std::strcmp(v, "0") == 0 ? 0 : 1;
  std::string kind = client.device_count() > 0 ? client.device_info(0).kind : "";
  hlo::Target t = hlo::Target::for_platform(client.platform_name(), kind, bf16_dots);
  t.cpu_half_conv_query = cpu_half_conv;
  return t;
}

}  // namespace torch_tpu::engine
