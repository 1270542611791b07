#include "warmup.h"

#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "../hlo/builder.h"

namespace torch_tpu::engine {

namespace {
// Matmuls in the orientations a forward and backward pass use (x·W, xᵀ·g,
// g·Wᵀ), big enough for Eigen's (oneDNN) path rather than XLA's inline small
// dots, and one long contraction, which oneDNN runs as blocks accumulated
// into the output (another kernel).
std::string warmup_program() {
  using hlo::ElementType;
  hlo::Builder b;
  hlo::Value a = b.parameter({ElementType::kF32, {128, 64}});
  hlo::Value w = b.parameter({ElementType::kF32, {64, 64}});
  hlo::Value l = b.parameter({ElementType::kF32, {16, 2048}});
  hlo::Value r = b.parameter({ElementType::kF32, {2048, 16}});
  auto dot = [&](hlo::Value x, hlo::Value y, int64_t cx, int64_t cy) {
    return b.dot_general(x, y, {}, {}, {cx}, {cy}, ElementType::kF32);
  };
  b.set_results({dot(a, w, 1, 0), dot(a, a, 0, 0), dot(a, w, 1, 1), dot(l, r, 1, 0)});
  return b.module();
}

void run(pjrt::Client& client, Cache& cache) {
  try {
    pjrt::ExecutablePtr exe = cache.get_uncounted(warmup_program());
    std::vector<float> zeros(2048 * 16, 0.0f);
    std::vector<pjrt::BufferPtr> inputs;
    for (const std::vector<int64_t>& dims :
         std::vector<std::vector<int64_t>>{{128, 64}, {64, 64}, {16, 2048}, {2048, 16}})
      inputs.push_back(client.buffer_from_host(zeros.data(), PJRT_Buffer_Type_F32, dims, 0));
    std::vector<PJRT_Buffer*> args;
    for (const auto& buffer : inputs) args.push_back(buffer->get());
    pjrt::ExecuteResult result = exe->execute(args, client.device(0));
    if (result.done) result.done->await();
  } catch (const std::exception&) {
    // Best effort: a failure here only leaves the first real step to pay.
  }
}
}  // namespace

bool Warmup::wanted(const hlo::Target& target) {
  const char* env = std::getenv("TORCH_TPU_WARMUP");
  if (env != nullptr && std::string(env) == "0") return false;
  return target.xla_cpu;
}

Warmup::Warmup(pjrt::Client& client, Cache& cache)
    : thread_([&client, &cache] { run(client, cache); }), owner_(::getpid()) {}

void Warmup::join() {
  if (thread_.joinable() && ::getpid() == owner_) thread_.join();
}

}  // namespace torch_tpu::engine
