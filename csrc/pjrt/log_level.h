// How much the plugin logs. XLA's plugins log through absl/tsl and print an
// absl banner plus INFO lines (XLA:CPU's "cpu_device_count set via
// create_options") on stderr at client creation; torch_tpu keeps them quiet
// unless asked.
#pragma once

#include <string>

namespace torch_tpu::pjrt {

// The plugin's minimum log level, from TORCH_TPU_LOG_LEVEL (INFO, WARNING,
// ERROR, FATAL or 0-3), set as TF_CPP_MIN_LOG_LEVEL, which tsl reads at the
// plugin's first log line; so this must run before the plugin is loaded.
// Without TORCH_TPU_LOG_LEVEL a TF_CPP_MIN_LOG_LEVEL the user set stays, and
// otherwise it is ERROR: the plugin's errors reach the caller as exceptions
// anyway. Throws Error naming the accepted values for anything else.
void apply_plugin_log_level();

// The level TORCH_TPU_LOG_LEVEL's `value` names (0 INFO .. 3 FATAL), or -1.
int parse_log_level(const std::string& value);

}  // namespace torch_tpu::pjrt
