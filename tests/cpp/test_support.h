// Shared by the GoogleTest tiers: the CPU plugin from the environment, one
// client with two devices for the whole binary, and running builder programs.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../../csrc/hlo/builder.h"
#include "../../csrc/pjrt/client.h"

namespace torch_tpu::testing {

// $TORCH_TPU_PJRT_PLUGIN, or empty when unset.
inline std::string plugin_path() {
  const char* p = std::getenv("TORCH_TPU_PJRT_PLUGIN");
  return p ? std::string(p) : std::string();
}

// One client (cpu_device_count = 2) for the process: plugins initialize once,
// and a client is costly to create. Null when no plugin is configured.
inline pjrt::Client* shared_client() {
  static std::unique_ptr<pjrt::Client> client = []() -> std::unique_ptr<pjrt::Client> {
    std::string path = plugin_path();
    if (path.empty()) return nullptr;
    auto plugin = pjrt::Plugin::load(path);
    return std::make_unique<pjrt::Client>(
        plugin, std::map<std::string, pjrt::Attribute>{{"cpu_device_count", int64_t{2}}});
  }();
  return client.get();
}

// Compiles the builder's module, runs it on `device` and waits.
inline std::vector<pjrt::BufferPtr> run(pjrt::Client& c, const hlo::Builder& b,
                                        const std::vector<pjrt::BufferPtr>& args,
                                        int device = 0) {
  pjrt::ExecutablePtr exe = c.compile(b.module());
  std::vector<PJRT_Buffer*> raw;
  for (const auto& a : args) raw.push_back(a->get());
  pjrt::ExecuteResult r = exe->execute(raw, c.device(device));
  if (r.done) r.done->await();
  return r.outputs;
}

template <typename T>
std::vector<T> download(const pjrt::Buffer& buffer) {
  int64_t n = 1;
  for (int64_t d : buffer.dims()) n *= d;
  std::vector<T> out(static_cast<size_t>(n));
  if (n > 0) buffer.to_host(out.data(), out.size() * sizeof(T));
  return out;
}

template <typename T>
pjrt::BufferPtr upload(pjrt::Client& c, const std::vector<T>& data, PJRT_Buffer_Type type,
                       const std::vector<int64_t>& dims, int device = 0) {
  return c.buffer_from_host(data.data(), type, dims, device);
}

}  // namespace torch_tpu::testing

// Skips the test (with the reason) when no plugin is configured.
#define TPU_REQUIRE_CLIENT(var)                                                  \
  ::torch_tpu::pjrt::Client* var = ::torch_tpu::testing::shared_client();        \
  if (var == nullptr)                                                            \
    GTEST_SKIP() << "set TORCH_TPU_PJRT_PLUGIN to a PJRT plugin .so (e.g. the "  \
                    "xla_cpu_pjrt.so of `pip install xla-cpu-pjrt`) to run this test"
