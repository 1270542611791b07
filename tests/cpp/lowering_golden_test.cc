// Lowering golden tests: one or two representative ops per lowering family,
// lowered from argument types alone (no device, no torch), the printed
// StableHLO module compared whole with tests/cpp/golden/<case>.mlir.
//
// A lowering change that alters the IR shows here as a diff; when the new IR
// is intended, regenerate and review the golden files:
//   TORCH_TPU_UPDATE_GOLDEN=1 build/cmake/tpu_cpp_tests --gtest_filter='LoweringGolden*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../../csrc/lowering/registry.h"

namespace torch_tpu::lowering {
namespace {

using hlo::ElementType;
constexpr ElementType F32 = ElementType::kF32, I64 = ElementType::kI64, U64 = ElementType::kU64,
                      PRED = ElementType::kPred, C64 = ElementType::kC64;

// The one place a test builds a lowering Context (keep it the only one).
Context make_context(Builder& b, const std::vector<TensorType>& outputs, const std::string& op) {
  // The lowerings as a TPU gets them: no XLA:CPU workaround in the goldens.
  static const hlo::Target tpu = hlo::Target::for_platform("tpu");
  return Context{b, outputs, Precision::kDefault, op, tpu};
}

// ---- arguments as the aten layer converts them ----------------------------------------

Arg tensor(Builder& b, ElementType dtype, std::vector<int64_t> shape) {
  Arg a;
  a.kind = Arg::kTensor;
  a.tensor = b.parameter({dtype, std::move(shape)});
  return a;
}
Arg scalar(Builder& b, ElementType dtype) {  // a Python number: 0-d, weak
  Arg a = tensor(b, dtype, {});
  a.scalar = true;
  return a;
}
Arg tensors(Builder& b, const std::vector<TensorType>& types) {
  Arg a;
  a.kind = Arg::kTensorList;
  for (const TensorType& t : types) a.tensors.push_back(b.parameter(t));
  return a;
}
Arg generator(Builder& b) {  // (seed, offset)
  Arg a;
  a.kind = Arg::kGenerator;
  a.tensors = {b.parameter({U64, {}}), b.parameter({U64, {}})};
  return a;
}
Arg integer(int64_t i) {
  Arg a;
  a.kind = Arg::kInt;
  a.i = i;
  return a;
}
Arg real(double d) {
  Arg a;
  a.kind = Arg::kDouble;
  a.d = d;
  return a;
}
Arg boolean(bool v) {
  Arg a;
  a.kind = Arg::kBool;
  a.b = v;
  return a;
}
Arg ints(std::vector<int64_t> v) {
  Arg a;
  a.kind = Arg::kIntList;
  a.ints = std::move(v);
  return a;
}
Arg str(std::string s) {
  Arg a;
  a.kind = Arg::kString;
  a.s = std::move(s);
  return a;
}
Arg none() { return Arg{}; }

struct Case {
  const char* name;  // the golden file's name: <family>_<op>
  const char* op;
  std::vector<TensorType> outputs;
  std::function<Args(Builder&)> args;
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

// The printed module of `c.op` lowered on `c`'s argument types.
std::string lower(const Case& c) {
  Builder b;
  Args args = c.args(b);
  const std::string op = c.op;
  Context ctx = make_context(b, c.outputs, op);
  const LoweringFn* fn = Registry::get().find(op);
  if (!fn) throw std::runtime_error(op + " has no lowering");
  b.set_results((*fn)(ctx, args));
  return b.module();
}

std::string golden_path(const std::string& name) {
  return std::string(TORCH_TPU_GOLDEN_DIR) + "/" + name + ".mlir";
}

const Case kCases[] = {
    {"elementwise_add_alpha", "aten::add.Tensor", {{F32, {2, 3}}},
     [](Builder& b) { return Args{tensor(b, F32, {2, 3}), tensor(b, F32, {3}), scalar(b, F32)}; }},
    {"elementwise_where", "aten::where.self", {{F32, {4}}},
     [](Builder& b) { return Args{tensor(b, PRED, {4}), tensor(b, F32, {4}), scalar(b, F32)}; }},
    {"reduction_sum_dim", "aten::sum.dim_IntList", {{F32, {2}}},
     [](Builder& b) { return Args{tensor(b, F32, {2, 3}), ints({1}), boolean(false), none()}; }},
    {"reduction_softmax", "aten::_softmax", {{F32, {2, 3}}},
     [](Builder& b) { return Args{tensor(b, F32, {2, 3}), integer(1), boolean(false)}; }},
    {"reduction_scan_cumsum", "aten::cumsum", {{F32, {5}}},
     [](Builder& b) { return Args{tensor(b, F32, {5}), integer(0), none()}; }},
    {"reduction_sort_topk", "aten::topk", {{F32, {2}}, {I64, {2}}},
     [](Builder& b) {
       return Args{tensor(b, F32, {5}), integer(2), integer(-1), boolean(true), boolean(true)};
     }},
    {"linalg_mm", "aten::mm", {{F32, {2, 4}}},
     [](Builder& b) { return Args{tensor(b, F32, {2, 3}), tensor(b, F32, {3, 4})}; }},
    {"linalg_decomp_cholesky", "aten::linalg_cholesky_ex", {{F32, {3, 3}}, {ElementType::kI32, {}}},
     [](Builder& b) { return Args{tensor(b, F32, {3, 3}), boolean(false), boolean(false)}; }},
    {"shape_cat", "aten::cat", {{F32, {3, 3}}},
     [](Builder& b) { return Args{tensors(b, {{F32, {2, 3}}, {F32, {1, 3}}}), integer(0)}; }},
    {"shape_flip", "aten::flip", {{F32, {2, 3}}},
     [](Builder& b) { return Args{tensor(b, F32, {2, 3}), ints({1})}; }},
    {"indexing_gather", "aten::gather", {{F32, {3, 2}}},
     [](Builder& b) {
       return Args{tensor(b, F32, {3, 4}), integer(1), tensor(b, I64, {3, 2}), boolean(false)};
     }},
    {"indexing_index_select", "aten::index_select", {{F32, {2, 3}}},
     [](Builder& b) { return Args{tensor(b, F32, {4, 3}), integer(0), tensor(b, I64, {2})}; }},
    {"nn_gelu", "aten::gelu", {{F32, {4}}},
     [](Builder& b) { return Args{tensor(b, F32, {4}), str("none")}; }},
    {"nn_loss_mse", "aten::mse_loss", {{F32, {}}},
     [](Builder& b) { return Args{tensor(b, F32, {4}), tensor(b, F32, {4}), integer(1)}; }},
    {"nn_norm_layer_norm", "aten::native_layer_norm", {{F32, {2, 4}}, {F32, {2, 1}}, {F32, {2, 1}}},
     [](Builder& b) {
       return Args{tensor(b, F32, {2, 4}), ints({4}), tensor(b, F32, {4}), tensor(b, F32, {4}),
                   real(1e-5)};
     }},
    {"conv_convolution", "aten::convolution_overrideable", {{F32, {1, 3, 3, 3}}},
     [](Builder& b) {
       return Args{tensor(b, F32, {1, 2, 5, 5}), tensor(b, F32, {3, 2, 3, 3}), none(),
                   ints({1, 1}), ints({0, 0}), ints({1, 1}), boolean(false), ints({0, 0}),
                   integer(1)};
     }},
    {"pool_max_pool2d", "aten::max_pool2d_with_indices", {{F32, {1, 1, 2, 2}}, {I64, {1, 1, 2, 2}}},
     [](Builder& b) {
       return Args{tensor(b, F32, {1, 1, 4, 4}), ints({2, 2}), ints({2, 2}), ints({0, 0}),
                   ints({1, 1}), boolean(false)};
     }},
    {"upsample_nearest2d", "aten::upsample_nearest2d", {{F32, {1, 1, 4, 4}}},
     [](Builder& b) { return Args{tensor(b, F32, {1, 1, 2, 2}), ints({4, 4}), none(), none()}; }},
    {"random_uniform", "aten::uniform", {{F32, {4}}},
     [](Builder& b) { return Args{tensor(b, F32, {4}), real(0), real(1), generator(b)}; }},
    {"factory_fill", "aten::fill.Scalar", {{F32, {2, 2}}},
     [](Builder& b) { return Args{tensor(b, F32, {2, 2}), scalar(b, F32)}; }},
    {"misc_trace", "aten::trace", {{F32, {}}},
     [](Builder& b) { return Args{tensor(b, F32, {3, 3})}; }},
    {"fft_r2c", "aten::_fft_r2c", {{C64, {5}}},
     [](Builder& b) { return Args{tensor(b, F32, {8}), ints({0}), integer(0), boolean(true)}; }},
    {"pointwise_extra_complex", "aten::complex", {{C64, {3}}},
     [](Builder& b) { return Args{tensor(b, F32, {3}), tensor(b, F32, {3})}; }},
    {"special_erfcx", "aten::special_erfcx", {{F32, {4}}},
     [](Builder& b) { return Args{tensor(b, F32, {4})}; }},
};

class LoweringGolden : public ::testing::TestWithParam<Case> {};

TEST_P(LoweringGolden, PrintedModuleMatchesGoldenFile) {
  const Case& c = GetParam();
  std::string text = lower(c);
  std::string path = golden_path(c.name);
  if (std::getenv("TORCH_TPU_UPDATE_GOLDEN")) {
    std::ofstream(path) << text;
    GTEST_SKIP() << "wrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "no golden file " << path
                         << ": run with TORCH_TPU_UPDATE_GOLDEN=1 and review it";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(text, expected.str()) << c.op << " lowers differently from " << path
                                  << " (TORCH_TPU_UPDATE_GOLDEN=1 rewrites it)";
}

INSTANTIATE_TEST_SUITE_P(Families, LoweringGolden, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Every golden file belongs to a case (a renamed case leaves none behind).
TEST(LoweringGoldenFiles, EachFileHasACase) {
  std::set<std::string> names;
  for (const Case& c : kCases) names.insert(std::string(c.name) + ".mlir");
  for (const auto& entry : std::filesystem::directory_iterator(TORCH_TPU_GOLDEN_DIR))
    EXPECT_TRUE(names.count(entry.path().filename().string()))
        << entry.path() << " has no case in lowering_golden_test.cc: delete it";
}

}  // namespace
}  // namespace torch_tpu::lowering
