// The recompilation watcher (engine/recompile_watcher.h) and flush causes
// (engine/flush_cause.h), from signatures alone: a site's second program of
// the same op sequence over new types is a reshaped recompilation only on a
// later run of its code; warnings come at the 4th, 8th, ... run that
// compiled and name the types that changed; every cause has a name.
#include <gtest/gtest.h>

#include "../../csrc/engine/flush_cause.h"
#include "../../csrc/engine/recompile_watcher.h"

namespace torch_tpu::engine {
namespace {

std::string sig(int n, const char* ops = "aten::mul aten::add") {
  return "tensor<" + std::to_string(n) + "xf32> tensor<f32> -> tensor<" + std::to_string(n) +
         "xf32> | " + ops;
}

TEST(RecompileWatcher, ReshapedOnlyOnALaterRunWithTheSameOps) {
  RecompileWatcher w;
  const std::string site = "model.py:12";
  EXPECT_FALSE(w.reshaped(site, "aten::mul", sig(8)));  // the site's first program
  w.note(site, "aten::mul", sig(8));
  EXPECT_FALSE(w.reshaped(site, "aten::mul", sig(9)));  // same run: the line's own shapes
  w.new_run();
  EXPECT_TRUE(w.reshaped(site, "aten::mul", sig(9)));
  EXPECT_FALSE(w.reshaped(site, "aten::mul", sig(9, "aten::mul aten::sub")));  // other ops
  EXPECT_FALSE(w.reshaped(site, "aten::add", sig(9)));  // another first op: another program
  EXPECT_FALSE(w.reshaped("model.py:13", "aten::mul", sig(9)));
  w.clear();
  EXPECT_FALSE(w.reshaped(site, "aten::mul", sig(9)));
}

TEST(RecompileWatcher, WarnsOncePerSiteNamingTheChangedDimension) {
  RecompileWatcher w;
  std::vector<int> warned_at;
  std::string last;
  for (int run = 1; run <= 16; ++run) {
    std::string warning = w.note("loop.py:3", "aten::mul", sig(run));
    w.note("loop.py:3", "aten::mul", sig(100 + run));  // a second program in the same run
    if (!warning.empty()) warned_at.push_back(run), last = warning;
    w.new_run();
  }
  EXPECT_EQ(warned_at, (std::vector<int>{4}));
  EXPECT_NE(last.find("loop.py:3 has compiled new programs on 4 runs (7 programs)"),
            std::string::npos)
      << last;
  EXPECT_NE(last.find("tensor<103xf32> became tensor<4xf32>"), std::string::npos) << last;
  EXPECT_NE(last.find("dimension 0 of input 0 (103 became 4)"), std::string::npos) << last;
  EXPECT_NE(last.find("torch.tpu.mark_dynamic"), std::string::npos) << last;
}

TEST(RecompileWatcher, WarnsOncePerLineWhateverItsFirstOps) {
  RecompileWatcher w;
  int warnings = 0;
  for (int run = 1; run <= 16; ++run) {
    warnings += !w.note("loop.py:3", "aten::fill", sig(run)).empty();
    warnings += !w.note("loop.py:3", "aten::mul", sig(run)).empty();
    warnings += !w.note("loop.py:4", "aten::mul", sig(run)).empty();
    w.new_run();
  }
  EXPECT_EQ(warnings, 2);  // one for each line
  w.clear();
  for (int run = 1; run <= 4; ++run, w.new_run()) warnings += !w.note("loop.py:3", "aten::mul", sig(run)).empty();
  EXPECT_EQ(warnings, 3);  // clear() forgets the warning too
}

TEST(RecompileWatcher, DescribesTheChange) {
  EXPECT_EQ(RecompileWatcher::describe_change(sig(4), sig(4, "aten::sub")),
            "the recorded op sequence changed");
  EXPECT_EQ(RecompileWatcher::describe_change(sig(4), "tensor<4xf32> -> | aten::mul"),
            "the number of inputs and results changed");
  EXPECT_EQ(RecompileWatcher::describe_change(sig(4), sig(5)),
            "tensor types changed (tensor<4xf32> became tensor<5xf32>, tensor<4xf32> became "
            "tensor<5xf32>); the size that varies is dimension 0 of input 0 (4 became 5)");
  EXPECT_EQ(RecompileWatcher::describe_change("tensor<2x7xf32> -> tensor<2xf32> | aten::sum",
                                              "tensor<2x9xf32> -> tensor<2xf32> | aten::sum"),
            "tensor types changed (tensor<2x7xf32> became tensor<2x9xf32>); the size that "
            "varies is dimension 1 of input 0 (7 became 9)");
  EXPECT_EQ(RecompileWatcher::describe_change("tensor<2x7xf32> -> | aten::sum",
                                              "tensor<3x9xf32> -> | aten::sum"),
            "tensor types changed (tensor<2x7xf32> became tensor<3x9xf32>)");
}

TEST(FlushCause, EveryCauseHasANameAndMetric) {
  for (size_t i = 0; i < kNumFlushCauses; ++i) {
    auto c = static_cast<FlushCause>(i);
    EXPECT_EQ(flush_cause_named(name(c)), c);
    EXPECT_EQ(std::string(metric(c)), std::string("flush_") + name(c));
  }
  EXPECT_FALSE(flush_cause_named("sometimes").has_value());
  EXPECT_TRUE(requested(FlushCause::kHostRead));
  EXPECT_FALSE(requested(FlushCause::kLoopBoundary));
}

}  // namespace
}  // namespace torch_tpu::engine
