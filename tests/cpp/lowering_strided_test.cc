// Views as programs: strided_read / strided_write run through PJRT and
// compared with the same view computed on the host.
#include <numeric>

#include "../../csrc/lowering/strided.h"
#include "test_support.h"

namespace torch_tpu::lowering {
namespace {

using testing::download;
using testing::run;
using testing::upload;

// Flat storage indices of a view's elements, row-major over its sizes.
std::vector<int64_t> host_indices(const Strided& v) {
  std::vector<int64_t> out;
  std::vector<int64_t> idx(v.sizes.size(), 0);
  for (int64_t n = 0; n < v.numel(); ++n) {
    int64_t pos = v.offset;
    for (size_t d = 0; d < idx.size(); ++d) pos += idx[d] * v.strides[d];
    out.push_back(pos);
    for (int64_t d = static_cast<int64_t>(idx.size()) - 1; d >= 0; --d) {
      if (++idx[d] < v.sizes[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<float> storage(int64_t n) {
  std::vector<float> s(n);
  for (int64_t i = 0; i < n; ++i) s[i] = 100.f + static_cast<float>(i);
  return s;
}

struct Case {
  const char* name;
  int64_t storage;
  Strided view;
  bool gathers;  // expected to fall back to a gather (read) / scatter (write)
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

const Case kReadCases[] = {
    {"contiguous", 6, {{2, 3}, {3, 1}, 0}, false},
    {"contiguous_with_offset", 12, {{2, 3}, {3, 1}, 5}, false},
    {"sliced_rows_cols", 20, {{2, 3}, {5, 1}, 6}, false},
    {"sliced_to_storage_end", 20, {{2, 3}, {5, 1}, 12}, false},
    {"transposed", 12, {{4, 3}, {1, 4}, 0}, false},
    {"transposed_3d", 24, {{4, 2, 3}, {1, 12, 4}, 0}, false},
    {"stepped_1d", 16, {{5}, {3}, 1}, false},
    {"stepped_columns", 24, {{4, 3}, {6, 2}, 0}, false},
    {"diagonal", 16, {{4}, {5}, 0}, false},
    {"expanded_row", 8, {{3, 4}, {0, 1}, 2}, false},
    {"expanded_scalar", 8, {{2, 3}, {0, 0}, 5}, false},
    {"size_one_dims", 10, {{1, 3, 1}, {7, 2, 99}, 3}, false},
    {"head_split_at_offset", 48, {{2, 2, 3}, {24, 3, 1}, 6}, false},  // k of a q|k|v split
    {"wrapping_offset_span", 20, {{2, 3}, {5, 1}, 4}, false},            // a row wraps: cut a span
    {"overlapping_windows", 5, {{3, 3}, {1, 1}, 0}, true},
    {"steps_not_dividing", 42, {{3, 2}, {14, 3}, 1}, true},
    {"empty", 4, {{0, 3}, {3, 1}, 0}, false},
};

class StridedRead : public ::testing::TestWithParam<Case> {};

TEST_P(StridedRead, MatchesHost) {
  TPU_REQUIRE_CLIENT(c);
  const Case& k = GetParam();
  Builder b;
  Value flat = b.parameter({ElementType::kF32, {k.storage}});
  Value out = strided_read(b, flat, k.view);
  ASSERT_EQ(out.shape(), k.view.sizes);
  b.set_results({out});
  std::string text = b.module();
  EXPECT_EQ(text.find("stablehlo.gather") != std::string::npos, k.gathers) << text;

  std::vector<float> s = storage(k.storage);
  auto result = run(*c, b, {upload(*c, s, PJRT_Buffer_Type_F32, {k.storage})});
  std::vector<float> expected;
  for (int64_t i : host_indices(k.view)) expected.push_back(s.at(i));
  EXPECT_EQ(download<float>(*result[0]), expected) << text;
}

INSTANTIATE_TEST_SUITE_P(Views, StridedRead, ::testing::ValuesIn(kReadCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Writes only to views whose elements are distinct (an overlapping write has
// no defined result).
const Case kWriteCases[] = {
    {"whole_storage", 6, {{2, 3}, {3, 1}, 0}, false},
    {"whole_storage_transposed", 12, {{4, 3}, {1, 4}, 0}, false},
    {"contiguous_segment", 12, {{2, 3}, {3, 1}, 5}, false},
    {"sliced_rows_cols", 20, {{2, 3}, {5, 1}, 6}, true},
    {"stepped_columns", 24, {{4, 3}, {6, 2}, 1}, true},
    {"diagonal", 16, {{4}, {5}, 0}, true},
    {"transposed_part", 24, {{4, 3}, {1, 4}, 12}, true},
    {"steps_not_dividing", 42, {{3, 2}, {14, 3}, 1}, true},
};

class StridedWrite : public ::testing::TestWithParam<Case> {};

TEST_P(StridedWrite, MatchesHost) {
  TPU_REQUIRE_CLIENT(c);
  const Case& k = GetParam();
  Builder b;
  Value flat = b.parameter({ElementType::kF32, {k.storage}});
  Value value = b.parameter({ElementType::kF32, k.view.sizes});
  b.set_results({strided_write(b, flat, value, k.view)});
  std::string text = b.module();
  EXPECT_EQ(text.find("stablehlo.scatter") != std::string::npos, k.gathers) << text;

  std::vector<float> s = storage(k.storage);
  std::vector<float> v(k.view.numel());
  for (size_t i = 0; i < v.size(); ++i) v[i] = -1.f - static_cast<float>(i);
  auto result = run(*c, b, {upload(*c, s, PJRT_Buffer_Type_F32, {k.storage}),
                            upload(*c, v, PJRT_Buffer_Type_F32, k.view.sizes)});
  std::vector<float> expected = s;
  std::vector<int64_t> where = host_indices(k.view);
  for (size_t i = 0; i < where.size(); ++i) expected.at(where[i]) = v[i];
  EXPECT_EQ(download<float>(*result[0]), expected) << text;
}

INSTANTIATE_TEST_SUITE_P(Views, StridedWrite, ::testing::ValuesIn(kWriteCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(StridedWrite, EmptyViewLeavesStorage) {
  Builder b;
  Value flat = b.parameter({ElementType::kF32, {4}});
  Value value = b.parameter({ElementType::kF32, {0, 2}});
  Value out = strided_write(b, flat, value, {{0, 2}, {2, 1}, 1});
  EXPECT_EQ(out.id(), flat.id());
}

TEST(StridedLayout, Contiguity) {
  EXPECT_TRUE((Strided{{2, 3}, {3, 1}, 0}).contiguous());
  EXPECT_TRUE((Strided{{2, 1, 3}, {3, 42, 1}, 7}).contiguous());  // size-1 dims ignored
  EXPECT_FALSE((Strided{{3, 2}, {1, 3}, 0}).contiguous());
  EXPECT_FALSE((Strided{{2, 3}, {0, 1}, 0}).contiguous());
  EXPECT_EQ((Strided{{2, 0, 3}, {0, 3, 1}, 0}).numel(), 0);
}

TEST(StridedLayout, DenseLayoutOnlyForWholeStorage) {
  Builder b;
  Value v = b.parameter({ElementType::kF32, {4, 3}});
  EXPECT_TRUE(dense_layout(b, v, {{4, 3}, {1, 4}, 0}, 12).valid());
  EXPECT_FALSE(dense_layout(b, v, {{4, 3}, {1, 4}, 0}, 13).valid());  // storage larger
  EXPECT_FALSE(dense_layout(b, v, {{4, 3}, {1, 4}, 1}, 12).valid());  // offset
  EXPECT_FALSE(dense_layout(b, v, {{4, 3}, {1, 5}, 0}, 12).valid());  // gaps
}

}  // namespace
}  // namespace torch_tpu::lowering
