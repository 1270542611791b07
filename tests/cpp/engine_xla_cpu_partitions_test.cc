// Small programs compile without XLA:CPU's loop partitions
// (csrc/engine/xla_cpu/partitions.h): the signature reader, the option it
// adds, and the optimized programs of the cache's compiles.
#include "../../csrc/engine/cache.h"
#include "../../csrc/engine/xla_cpu/partitions.h"
#include "test_support.h"

namespace torch_tpu::engine {
namespace {

using hlo::Builder;
using hlo::ElementType;
using hlo::Value;

// tanh of an f32 [n, 1024] array: a loop fusion XLA:CPU partitions when it
// is large enough.
std::string tanh_program(int64_t n) {
  Builder b;
  Value x = b.parameter({ElementType::kF32, {n, 1024}});
  b.set_results({b.tanh(x)});
  return b.module();
}

bool partitioned(const pjrt::Executable& exe) {
  return exe.optimized_program().code.find("outer_dimension_partitions") != std::string::npos;
}

TEST(XlaCpuPartitions, ReadsTheLargestParameterOrResult) {
  Builder b;
  Value x = b.parameter({ElementType::kF32, {4096}});
  Value y = b.parameter({ElementType::kBF16, {2, 3}});
  b.set_results({b.convert(y, ElementType::kF64), x});
  EXPECT_EQ(xla_cpu::largest_signature_bytes(b.module()), 4096 * 4);

  Builder c;  // a scalar and complex parameters; the result is the largest
  Value s = c.parameter({ElementType::kF32, {}});
  Value z = c.parameter({ElementType::kC64, {3}});
  c.set_results({c.broadcast_in_dim(s, {5, 7}, {}), z});
  EXPECT_EQ(xla_cpu::largest_signature_bytes(c.module()), 5 * 7 * 4);
  EXPECT_EQ(xla_cpu::largest_signature_bytes(
                "module {\n  func.func public @main(%1: tensor<3xcomplex<f64>>) -> "
                "(tensor<2x2xi1>) {\n"),
            3 * 16);
}

TEST(XlaCpuPartitions, UnreadableSignaturesAreNotSmall) {
  EXPECT_EQ(xla_cpu::largest_signature_bytes("module { }"), -1);
  EXPECT_EQ(xla_cpu::largest_signature_bytes(
                "module {\n  func.func public @main(%1: tensor<?x4xf32, "
                "#stablehlo.bounds<8, ?>>) -> (tensor<4xf32>) {\n"),
            -1);
  EXPECT_EQ(xla_cpu::largest_signature_bytes(
                "module {\n  func.func public @main(%1: tensor<4xf4E2M1FN>) -> "
                "(tensor<4xf32>) {\n"),
            -1);
  pjrt::CompileOverrides none;
  EXPECT_TRUE(xla_cpu::unpartitioned_if_small("module { }", none, "").empty());
}

TEST(XlaCpuPartitions, SmallProgramsDisableThePassAfterTheProcesssOwn) {
  pjrt::CompileOverrides none;
  pjrt::CompileOverrides small =
      xla_cpu::unpartitioned_if_small(tanh_program(4), none, "tree_reduction_rewriter");
  ASSERT_EQ(small.values().count("xla_disable_hlo_passes"), 1u);
  EXPECT_EQ(std::get<std::string>(small.values().at("xla_disable_hlo_passes")),
            "tree_reduction_rewriter,cpu-parallel-task-assigner");
  EXPECT_EQ(std::get<std::string>(xla_cpu::unpartitioned_if_small(tanh_program(4), none, "")
                                      .values()
                                      .at("xla_disable_hlo_passes")),
            "cpu-parallel-task-assigner");
  // 256 KiB is small; one row more is not.
  EXPECT_FALSE(xla_cpu::unpartitioned_if_small(tanh_program(64), none, "").empty());
  EXPECT_TRUE(xla_cpu::unpartitioned_if_small(tanh_program(65), none, "").empty());
  // A caller's own choice of passes stays as given.
  pjrt::CompileOverrides own;
  own.set("xla_disable_hlo_passes", std::string("foo"));
  own.set("xla_cpu_enable_fast_math", false);
  pjrt::CompileOverrides kept = xla_cpu::unpartitioned_if_small(tanh_program(4), own, "");
  EXPECT_EQ(kept.text(), own.text());
}

TEST(XlaCpuPartitions, TheCacheCompilesSmallProgramsUnpartitioned) {
  TPU_REQUIRE_CLIENT(c);
  Metrics metrics;
  Cache plain(*c, metrics, "");
  Cache tuned(*c, metrics, "");
  tuned.set_unpartitioned_small(true);
  // XLA:CPU splits a 256 KiB tanh in two; the tuned cache's is whole, and a
  // 4 MiB one stays split.
  ASSERT_TRUE(partitioned(*plain.get(tanh_program(64))));
  EXPECT_FALSE(partitioned(*tuned.get(tanh_program(64))));
  EXPECT_TRUE(partitioned(*tuned.get(tanh_program(1024))));
}

}  // namespace
}  // namespace torch_tpu::engine
