// The lowering registry: one place per op (a repeated name is refused, naming
// both places) and each entry's family, the file that registered it.
#include <gtest/gtest.h>

#include <string>

#include "../../csrc/lowering/registry.h"

namespace torch_tpu::lowering {
namespace {

Values nothing(Context&, const Args&) { return {}; }

TEST(LoweringRegistry, RefusesARepeatedNameNamingBothPlaces) {
  Registry r;
  r.add("aten::twice", nothing); const int first = __LINE__;
  try {
    r.add("aten::twice", nothing); const int second = __LINE__;
    FAIL() << "a repeated name was accepted (line " << second << ")";
  } catch (const std::logic_error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("aten::twice is registered twice"), std::string::npos) << m;
    EXPECT_NE(m.find("lowering_registry_test.cc:" + std::to_string(first)), std::string::npos) << m;
    EXPECT_NE(m.find("lowering_registry_test.cc:" + std::to_string(first + 2)), std::string::npos)
        << m;
  }
  EXPECT_NE(r.find("aten::twice"), nullptr);  // the first stays
  EXPECT_EQ(r.ops().size(), 1u);
}

TEST(LoweringRegistry, FamilyIsTheRegisteringFile) {
  Registry r;
  r.add("aten::here", nothing);
  EXPECT_EQ(r.family("aten::here"), "lowering_registry_test");
  EXPECT_EQ(r.where("aten::here").rfind("cpp/lowering_registry_test.cc:", 0), 0u) << r.where("aten::here");
  EXPECT_EQ(r.family("aten::absent"), "");
  EXPECT_EQ(r.where("aten::absent"), "");
}

// Every family registers without a repeated name (get() would throw).
TEST(LoweringRegistry, AllFamiliesRegisterEachNameOnce) {
  const Registry& r = Registry::get();
  EXPECT_GT(r.ops().size(), 500u);
  EXPECT_EQ(r.family("aten::add.Tensor"), "elementwise");
  EXPECT_EQ(r.family("aten::complex"), "pointwise_extra");
  EXPECT_EQ(r.family("aten::polar"), "pointwise_extra");
  EXPECT_EQ(r.where("aten::mm").rfind("lowering/linalg.cc:", 0), 0u) << r.where("aten::mm");
}

}  // namespace
}  // namespace torch_tpu::lowering
