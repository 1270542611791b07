#include "log_level.h"

#include <strings.h>

#include <cstdlib>

#include "api.h"

namespace torch_tpu::pjrt {

int parse_log_level(const std::string& value) {
  static constexpr const char* kNames[] = {"INFO", "WARNING", "ERROR", "FATAL"};
  for (int i = 0; i < 4; ++i)
    if (::strcasecmp(value.c_str(), kNames[i]) == 0 || value == std::to_string(i)) return i;
  return -1;
}

void apply_plugin_log_level() {
  const char* asked = std::getenv("TORCH_TPU_LOG_LEVEL");
  if (asked == nullptr || *asked == '\0') {
    setenv("TF_CPP_MIN_LOG_LEVEL", "2", /*overwrite=*/0);
    return;
  }
  int level = parse_log_level(asked);
  if (level < 0)
    throw Error("TORCH_TPU_LOG_LEVEL='" + std::string(asked) +
                "' is not a log level: use INFO, WARNING, ERROR or FATAL (or 0-3); unset, the "
                "plugin logs errors only.");
  setenv("TF_CPP_MIN_LOG_LEVEL", std::to_string(level).c_str(), /*overwrite=*/1);
}

}  // namespace torch_tpu::pjrt
