// The target profile decides what a lowering emits: the same op, built for
// two profiles, prints different programs where the plugins need them to.
// No plugin needed: the profiles are built directly from platform names.
#include <gtest/gtest.h>

#include <string>

#include "../../csrc/hlo/target.h"
#include "../../csrc/lowering/registry.h"

namespace torch_tpu::lowering {
namespace {

using hlo::Target;

Arg tensor(Value v) {
  Arg a;
  a.kind = Arg::kTensor;
  a.tensor = v;
  return a;
}
Arg ints(std::vector<int64_t> v) {
  Arg a;
  a.kind = Arg::kIntList;
  a.ints = std::move(v);
  return a;
}
Arg integer(int64_t i) {
  Arg a;
  a.kind = Arg::kInt;
  a.i = i;
  return a;
}
Arg bools(std::vector<bool> v) {
  Arg a;
  a.kind = Arg::kBoolList;
  a.bools = std::move(v);
  return a;
}
Arg boolean(bool b) {
  Arg a;
  a.kind = Arg::kBool;
  a.b = b;
  return a;
}

// The printed module of `op` lowered for `target` on `inputs` with results
// `outputs`.
std::string lower(const Target& target, const std::string& op,
                  const std::vector<TensorType>& inputs, const std::vector<TensorType>& outputs,
                  Args tail = {}, Precision precision = Precision::kDefault) {
  Builder b;
  Args args;
  for (const TensorType& t : inputs) args.push_back(tensor(b.parameter(t)));
  for (Arg& a : tail) args.push_back(std::move(a));
  const LoweringFn* fn = Registry::get().find(op);
  EXPECT_NE(fn, nullptr) << op;
  if (fn == nullptr) return "";
  Context c{b, outputs, LazyPrecision(precision), op, target};
  b.set_results((*fn)(c, args));
  return b.module();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(TargetProfile, RecognisesAPluginByItsPlatformName) {
  Target cpu = Target::for_platform("cpu"), gpu = Target::for_platform("cuda");
  EXPECT_TRUE(cpu.xla_cpu);
  EXPECT_TRUE(cpu.bf16_split_dots);
  EXPECT_TRUE(cpu.checked_bf16_dots);
  EXPECT_FALSE(gpu.xla_cpu);
  EXPECT_FALSE(gpu.bf16_split_dots);
  EXPECT_FALSE(gpu.checked_bf16_dots);
  // TORCH_TPU_BF16_DOTS, as the engine read it, overrides the default.
  EXPECT_FALSE(Target::for_platform("cpu", "", 0).bf16_split_dots);
  EXPECT_TRUE(Target::for_platform("cpu", "", 0).checked_bf16_dots);  // bf16 dots still run
  EXPECT_TRUE(Target::for_platform("tpu", "", 1).bf16_split_dots);
  EXPECT_TRUE(Target::for_platform("tpu", "", 1).checked_bf16_dots);
}

TEST(TargetProfile, XlaCpuTakesF32SplitTermsAsMarkedBf16Dots) {
  TensorType a{ElementType::kF32, {4, 8}}, w{ElementType::kF32, {8, 3}}, y{ElementType::kF32, {4, 3}};
  std::string cpu = lower(Target::for_platform("cpu"), "aten::mm", {a, w}, {y}, {},
                          Precision::kHigh);
  std::string gpu = lower(Target::for_platform("cuda"), "aten::mm", {a, w}, {y}, {},
                          Precision::kHigh);
  // bf16x3: three products either way; only XLA:CPU's take bf16 operands,
  // each group marked for the compile's check.
  EXPECT_EQ(count(cpu, "stablehlo.dot_general"), 3u);
  EXPECT_EQ(count(gpu, "stablehlo.dot_general"), 3u);
  EXPECT_GE(count(cpu, "tensor<4x8xbf16>"), 3u) << cpu;  // each product's lhs
  EXPECT_NE(cpu.find(std::string(hlo::kBf16SplitMarker)), std::string::npos);
  EXPECT_EQ(gpu.find("bf16"), std::string::npos) << gpu;
  EXPECT_EQ(gpu.find(std::string(hlo::kBf16SplitMarker)), std::string::npos);
}

TEST(TargetProfile, Bf16DotsAreMarkedOnlyWhereTheyAreChecked) {
  TensorType a{ElementType::kBF16, {4, 8}}, w{ElementType::kBF16, {8, 3}},
      y{ElementType::kBF16, {4, 3}};
  std::string cpu = lower(Target::for_platform("cpu"), "aten::mm", {a, w}, {y});
  std::string gpu = lower(Target::for_platform("cuda"), "aten::mm", {a, w}, {y});
  EXPECT_NE(cpu.find(std::string(hlo::kBf16SplitMarker)), std::string::npos) << cpu;
  EXPECT_EQ(gpu.find(std::string(hlo::kBf16SplitMarker)), std::string::npos) << gpu;
  EXPECT_EQ(count(cpu, "stablehlo.dot_general"), count(gpu, "stablehlo.dot_general"));
}

TEST(TargetProfile, XlaCpuTakesAConvolutionsWeightGradientAsOneDotPerTap) {
  TensorType gy{ElementType::kF32, {2, 4, 6, 6}}, x{ElementType::kF32, {2, 3, 6, 6}},
      w{ElementType::kF32, {4, 3, 3, 3}};
  auto weight_grad = [&](const Target& t) {
    return lower(t, "aten::convolution_backward_overrideable", {gy, x, w},
                 {{ElementType::kF32, {2, 3, 6, 6}}, w, {ElementType::kF32, {4}}},
                 {ints({1, 1}), ints({1, 1}), ints({1, 1}), boolean(false), ints({0, 0}),
                  integer(1), bools({false, true, false})});
  };
  std::string cpu = weight_grad(Target::for_platform("cpu")),
              tpu = weight_grad(Target::for_platform("tpu"));
  EXPECT_EQ(count(cpu, "stablehlo.convolution"), 0u) << cpu;
  EXPECT_EQ(count(cpu, "stablehlo.dot_general"), 9u) << cpu;  // one per tap of the 3x3 kernel
  EXPECT_EQ(count(tpu, "stablehlo.convolution"), 1u) << tpu;
  EXPECT_EQ(count(tpu, "stablehlo.dot_general"), 0u) << tpu;
}

// A 16-bit transposed convolution follows the host's CPU kernel: oneDNN
// (one rounding) or the slow col2im kernel (a rounding per kernel tap).
bool onednn_everything(ElementType) { return true; }
bool onednn_nothing(ElementType) { return false; }

TEST(TargetProfile, CpuNumericsChooseTheTransposedConvolutionsRounding) {
  TensorType x{ElementType::kF16, {1, 2, 3, 3}}, w{ElementType::kF16, {2, 1, 2, 2}},
      y{ElementType::kF16, {1, 1, 6, 6}};
  auto conv_t = [&](hlo::HalfConvQuery query) {
    Target t = Target::for_platform("cpu");
    t.cpu_half_conv_query = query;
    Arg none;
    return lower(t, "aten::convolution_overrideable", {x, w}, {y},
                 {none, ints({2, 2}), ints({0, 0}), ints({1, 1}), boolean(true), ints({0, 0}),
                  integer(1)});
  };
  std::string onednn = conv_t(&onednn_everything), col2im = conv_t(&onednn_nothing);
  EXPECT_EQ(count(onednn, "stablehlo.convolution"), 1u) << onednn;
  EXPECT_EQ(count(col2im, "stablehlo.convolution"), 4u) << col2im;  // one per tap
  // Unset (no torch): the common x86 case, f16 through the slow kernel.
  EXPECT_EQ(conv_t(nullptr), col2im);
}

}  // namespace
}  // namespace torch_tpu::lowering
