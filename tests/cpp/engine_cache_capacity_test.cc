// The compile cache's memory tier is bounded, least recently used out: an
// unbounded one kept every executable of a long process alive until XLA:CPU's
// JIT code maps exhausted vm.max_map_count (the sweep workers' SIGSEGV).
#include "../../csrc/engine/cache.h"
#include "test_support.h"

namespace torch_tpu::engine {
namespace {

using hlo::Builder;
using hlo::ElementType;
using hlo::Value;

// x * c: a distinct program (and fingerprint) per c.
struct Scaled {
  std::string text;
  hlo::Fingerprint key;
  explicit Scaled(float c) {
    Builder b;
    Value x = b.parameter({ElementType::kF32, {2}});
    b.set_results({b.mul(x, b.full({ElementType::kF32, {2}}, c))});
    text = b.module();
    key = b.fingerprint();
  }
};

std::vector<float> run(pjrt::Client& client, const pjrt::Executable& exe) {
  auto x = testing::upload<float>(client, {1, 2}, PJRT_Buffer_Type_F32, {2});
  pjrt::ExecuteResult r = exe.execute({x->get()}, client.device(0));
  if (r.done) r.done->await();
  return testing::download<float>(*r.outputs[0]);
}

TEST(EngineCacheCapacity, EvictsLeastRecentlyUsed) {
  TPU_REQUIRE_CLIENT(c);
  Metrics metrics;
  Cache cache(*c, metrics, "", 2);
  Scaled p1(1), p2(2), p3(3);
  cache.get(p1.key, p1.text);
  cache.get(p2.key, p2.text);
  ASSERT_NE(cache.lookup(p1.key), nullptr);  // p1 is now the most recent
  cache.get(p3.key, p3.text);                // evicts p2
  EXPECT_EQ(cache.stats().entries, 2);
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_EQ(metrics.snapshot()["cache_evictions"], 1);
  EXPECT_NE(cache.lookup(p1.key), nullptr);
  EXPECT_NE(cache.lookup(p3.key), nullptr);
  EXPECT_EQ(cache.lookup(p2.key), nullptr);
  // An evicted program compiles again and runs.
  EXPECT_EQ(run(*c, *cache.get(p2.key, p2.text)), (std::vector<float>{2, 4}));
  EXPECT_EQ(cache.stats().misses, 4);
}

TEST(EngineCacheCapacity, EvictedExecutableHeldByCallerStaysUsable) {
  TPU_REQUIRE_CLIENT(c);
  Metrics metrics;
  Cache cache(*c, metrics, "", 1);
  Scaled p1(5), p2(6);
  pjrt::ExecutablePtr held = cache.get(p1.key, p1.text);
  cache.get(p2.key, p2.text);
  EXPECT_EQ(cache.lookup(p1.key), nullptr);
  EXPECT_EQ(run(*c, *held), (std::vector<float>{5, 10}));
}

TEST(EngineCacheCapacity, ShrinkingEvictsAtOnce) {
  TPU_REQUIRE_CLIENT(c);
  Metrics metrics;
  Cache cache(*c, metrics, "");
  EXPECT_EQ(cache.capacity(), Cache::kDefaultCapacity);
  for (float v : {7.0f, 8.0f, 9.0f}) {
    Scaled p(v);
    cache.get(p.key, p.text);
  }
  cache.set_capacity(1);
  EXPECT_EQ(cache.stats().entries, 1);
  EXPECT_EQ(cache.stats().evictions, 2);
  EXPECT_NE(cache.lookup(Scaled(9).key), nullptr);  // the most recent stays
  cache.set_capacity(0);                             // clamped to 1
  EXPECT_EQ(cache.capacity(), 1u);
}

}  // namespace
}  // namespace torch_tpu::engine
