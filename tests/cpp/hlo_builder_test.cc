// The StableHLO builder without a device: whole printed modules compared with
// the expected text, and operand type errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../../csrc/hlo/builder.h"

namespace torch_tpu::hlo {
namespace {

constexpr ElementType F32 = ElementType::kF32;

// The body lines of a one-function module with the given signature.
std::string module(const std::string& params, const std::string& results,
                   const std::string& body) {
  return "module @torch_tpu {\n  func.func public @main(" + params + ") -> (" + results +
         ") {\n" + body + "  }\n}\n";
}

TEST(HloGolden, Add) {
  Builder b;
  Value x = b.parameter({F32, {2, 3}});
  Value y = b.parameter({F32, {2, 3}});
  b.set_results({b.add(x, y)});
  EXPECT_EQ(b.module(),
            module("%0: tensor<2x3xf32>, %1: tensor<2x3xf32>", "tensor<2x3xf32>",
                   "    %2 = \"stablehlo.add\"(%0, %1) : (tensor<2x3xf32>, tensor<2x3xf32>) "
                   "-> tensor<2x3xf32>\n"
                   "    \"func.return\"(%2) : (tensor<2x3xf32>) -> ()\n"));
  EXPECT_EQ(b.num_ops(), 1u);
}

TEST(HloGolden, BroadcastInDim) {
  Builder b;
  Value x = b.parameter({F32, {3}});
  b.set_results({b.broadcast_in_dim(x, {2, 3}, {1})});
  EXPECT_EQ(b.module(),
            module("%0: tensor<3xf32>", "tensor<2x3xf32>",
                   "    %1 = \"stablehlo.broadcast_in_dim\"(%0) {broadcast_dimensions = "
                   "array<i64: 1>} : (tensor<3xf32>) -> tensor<2x3xf32>\n"
                   "    \"func.return\"(%1) : (tensor<2x3xf32>) -> ()\n"));
}

TEST(HloGolden, IdentityShapeOpsEmitNothing) {
  Builder b;
  Value x = b.parameter({F32, {2, 3}});
  EXPECT_EQ(b.broadcast_in_dim(x, {2, 3}, {0, 1}).id(), x.id());
  EXPECT_EQ(b.reshape(x, {2, 3}).id(), x.id());
  EXPECT_EQ(b.transpose(x, {0, 1}).id(), x.id());
  EXPECT_EQ(b.slice(x, {0, 0}, {2, 3}).id(), x.id());
  EXPECT_EQ(b.convert(x, F32).id(), x.id());
  EXPECT_EQ(b.num_ops(), 0u);
}

TEST(HloGolden, TransposesRememberTheirSourceAndFold) {
  Builder b;
  Value x = b.parameter({F32, {2, 3, 4}});
  Value t = b.transpose(x, {2, 0, 1});
  Value source;
  std::vector<int64_t> perm;
  ASSERT_TRUE(b.transposed(t, &source, &perm));
  EXPECT_EQ(source.id(), x.id());
  EXPECT_EQ(perm, (std::vector<int64_t>{2, 0, 1}));
  EXPECT_FALSE(b.transposed(x, &source, &perm));
  EXPECT_EQ(b.transpose(t, {1, 2, 0}).id(), x.id());  // undoes it: nothing emitted
  Value u = b.transpose(t, {0, 2, 1});                // one transpose of x
  ASSERT_TRUE(b.transposed(u, &source, &perm));
  EXPECT_EQ(source.id(), x.id());
  EXPECT_EQ(perm, (std::vector<int64_t>{2, 1, 0}));
  EXPECT_EQ(u.shape(), (std::vector<int64_t>{4, 3, 2}));
  EXPECT_EQ(b.num_ops(), 2u);
}

TEST(HloGolden, ReshapeChainsFoldInTheFunctionBody) {
  Builder b;
  Value x = b.parameter({F32, {2, 3}});
  Value flat = b.reshape(x, {6});
  EXPECT_EQ(b.reshape(flat, {2, 3}).id(), x.id());  // back to the source: no op
  EXPECT_EQ(b.reshape(x, {6}).id(), flat.id());     // a repeat is reused
  Value t = b.reshape(flat, {3, 2});                // made from x, not from flat
  b.set_results({t});
  EXPECT_EQ(b.num_ops(), 2u);
  EXPECT_NE(b.module().find("\"stablehlo.reshape\"(%0) : (tensor<2x3xf32>) -> tensor<3x2xf32>"),
            std::string::npos);
}

TEST(HloGolden, ReshapesInsideRegionsAreNotFolded) {
  Builder b;
  Value x = b.parameter({F32, {4}});
  Value init = b.constant(F32, 0.0);
  b.reduce({x}, {init}, {0}, [](Builder& r, const Values& a) {
    Value s = r.reshape(r.reshape(a[0], {1}), {});  // stays two reshapes
    return Values{r.add(s, a[1])};
  });
  EXPECT_NE(b.module().find("tensor<f32>) -> tensor<1xf32>"), std::string::npos);
  EXPECT_NE(b.module().find("tensor<1xf32>) -> tensor<f32>"), std::string::npos);
}

TEST(HloGolden, ConstantsAndSplatsAreMadeOncePerBlock) {
  Builder b;
  Value x = b.parameter({F32, {2, 3}});
  Value one = b.constant(F32, 1.0);
  EXPECT_EQ(b.constant(F32, 1.0).id(), one.id());
  EXPECT_NE(b.constant(F32, 2.0).id(), one.id());
  EXPECT_NE(b.constant(ElementType::kF64, 1.0).id(), one.id());
  Value s = b.broadcast_in_dim(one, {2, 3}, {});
  EXPECT_EQ(b.broadcast_in_dim(b.constant(F32, 1.0), {2, 3}, {}).id(), s.id());
  EXPECT_NE(b.broadcast_in_dim(one, {3, 2}, {}).id(), s.id());
  // Inside a region the body's constant is not visible: a new one is made.
  int inner = -1;
  b.reduce({x}, {one}, {1}, [&](Builder& r, const Values& a) {
    Value c = r.constant(F32, 1.0);
    inner = c.id();
    EXPECT_EQ(r.constant(F32, 1.0).id(), inner);
    return Values{r.add(r.add(a[0], a[1]), c)};
  });
  EXPECT_NE(inner, one.id());
  EXPECT_EQ(b.constant(F32, 1.0).id(), one.id());  // the body's again after the region
  b.clear();
  Value y = b.parameter({F32, {2}});
  Value two = b.constant(F32, 2.0);
  b.set_results({b.add(y, b.broadcast_in_dim(two, {2}, {}))});
  EXPECT_EQ(b.module().find("dense<0x3F800000>"), std::string::npos);  // clear() forgot 1.0
}

TEST(HloGolden, ReduceWithRegion) {
  Builder b;
  Value x = b.parameter({F32, {2, 3}});
  Value init = b.constant(F32, 0.0);
  Values sum = b.reduce({x}, {init}, {1}, [](Builder& r, const Values& a) {
    return Values{r.add(a[0], a[1])};
  });
  b.set_results(sum);
  EXPECT_EQ(b.module(),
            module("%0: tensor<2x3xf32>", "tensor<2xf32>",
                   "    %1 = \"stablehlo.constant\"() {value = dense<0x00000000> : "
                   "tensor<f32>} : () -> tensor<f32>\n"
                   "    %5 = \"stablehlo.reduce\"(%0, %1) ({\n"
                   "      ^bb0(%2: tensor<f32>, %3: tensor<f32>):\n"
                   "        %4 = \"stablehlo.add\"(%2, %3) : (tensor<f32>, tensor<f32>) -> "
                   "tensor<f32>\n"
                   "        \"stablehlo.return\"(%4) : (tensor<f32>) -> ()\n"
                   "    }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> "
                   "tensor<2xf32>\n"
                   "    \"func.return\"(%5) : (tensor<2xf32>) -> ()\n"));
}

TEST(HloGolden, DotGeneralWithPrecision) {
  Builder b;
  Value x = b.parameter({F32, {5, 2, 3}});
  Value y = b.parameter({F32, {5, 3, 4}});
  b.set_results({b.dot_general(x, y, {0}, {0}, {2}, {1}, F32, "HIGHEST")});
  EXPECT_EQ(b.module(),
            module("%0: tensor<5x2x3xf32>, %1: tensor<5x3x4xf32>", "tensor<5x2x4xf32>",
                   "    %2 = \"stablehlo.dot_general\"(%0, %1) {dot_dimension_numbers = "
                   "#stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = "
                   "[0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>, "
                   "precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision "
                   "HIGHEST>]} : (tensor<5x2x3xf32>, tensor<5x3x4xf32>) -> tensor<5x2x4xf32>\n"
                   "    \"func.return\"(%2) : (tensor<5x2x4xf32>) -> ()\n"));
}

TEST(HloGolden, CompareAndSelect) {
  Builder b;
  Value x = b.parameter({F32, {4}});
  Value y = b.parameter({F32, {4}});
  Value lt = b.compare(Compare::kLT, x, y);
  b.set_results({b.select(lt, x, y)});
  EXPECT_EQ(b.module(),
            module("%0: tensor<4xf32>, %1: tensor<4xf32>", "tensor<4xf32>",
                   "    %2 = \"stablehlo.compare\"(%0, %1) {comparison_direction = "
                   "#stablehlo<comparison_direction LT>, compare_type = "
                   "#stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> "
                   "tensor<4xi1>\n"
                   "    %3 = \"stablehlo.select\"(%2, %0, %1) : (tensor<4xi1>, tensor<4xf32>, "
                   "tensor<4xf32>) -> tensor<4xf32>\n"
                   "    \"func.return\"(%3) : (tensor<4xf32>) -> ()\n"));
}

TEST(HloGolden, IntegerComparesNameTheirSignedness) {
  Builder b;
  Value x = b.parameter({ElementType::kI32, {}});
  Value u = b.parameter({ElementType::kU8, {}});
  b.set_results({b.compare(Compare::kGE, x, x), b.compare(Compare::kLT, u, u)});
  std::string text = b.module();
  EXPECT_NE(text.find("\"stablehlo.compare\"(%0, %0) {comparison_direction = "
                      "#stablehlo<comparison_direction GE>, compare_type = "
                      "#stablehlo<comparison_type SIGNED>} : (tensor<i32>, "
                      "tensor<i32>) -> tensor<i1>"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("comparison_direction LT>, compare_type = #stablehlo<comparison_type "
                      "UNSIGNED>} : (tensor<ui8>, tensor<ui8>)"),
            std::string::npos)
      << text;
}

TEST(HloGolden, MultipleResultsAndDonation) {
  Builder b;
  Value x = b.parameter({ElementType::kI64, {2}});
  b.set_donated(0);
  b.set_results({b.neg(x), x});
  EXPECT_EQ(b.module(),
            module("%0: tensor<2xi64> {jax.buffer_donor = true}", "tensor<2xi64>, tensor<2xi64>",
                   "    %1 = \"stablehlo.negate\"(%0) : (tensor<2xi64>) -> tensor<2xi64>\n"
                   "    \"func.return\"(%1, %0) : (tensor<2xi64>, tensor<2xi64>) -> ()\n"));
}

TEST(HloGolden, ADonatedParameterTakenInItsResultsShape) {
  Builder b;
  Value x = b.parameter({ElementType::kF32, {6}});
  Value y = b.reshape(x, {2, 3});
  b.set_donated(0);
  b.take_parameter_as(0, y.type());
  b.set_results({b.neg(y)});
  EXPECT_EQ(b.module(),
            module("%p0: tensor<2x3xf32> {jax.buffer_donor = true}", "tensor<2x3xf32>",
                   "    %0 = \"stablehlo.reshape\"(%p0) : (tensor<2x3xf32>) -> tensor<6xf32>\n"
                   "    %1 = \"stablehlo.reshape\"(%0) : (tensor<6xf32>) -> tensor<2x3xf32>\n"
                   "    %2 = \"stablehlo.negate\"(%1) : (tensor<2x3xf32>) -> tensor<2x3xf32>\n"
                   "    \"func.return\"(%2) : (tensor<2x3xf32>) -> ()\n"));
  Builder same;
  Value z = same.parameter({ElementType::kF32, {6}});
  same.take_parameter_as(0, z.type());  // its own type: printed as declared
  same.set_results({z});
  EXPECT_EQ(same.module().find("%p0"), std::string::npos) << same.module();
  EXPECT_THROW(same.take_parameter_as(0, {ElementType::kF32, {2, 2}}), TypeError);
  EXPECT_THROW(same.take_parameter_as(0, {ElementType::kI32, {2, 3}}), TypeError);
}

TEST(HloGolden, ADonatedParameterNamedAsItsResultsBuffer) {
  Builder b;
  Value x = b.parameter({ElementType::kF32, {6}});
  Value s = b.parameter({ElementType::kF32, {6}});
  Value y = b.reshape(x, {2, 3});
  b.set_donated(0);
  b.set_donated(1);
  b.take_parameter_as(0, y.type());
  b.alias_result(0, 1, y.type());  // result 1 overwrites parameter 0
  b.set_results({b.neg(s), b.neg(y)});
  std::string m = b.module();
  EXPECT_NE(m.find("@main(%p0: tensor<2x3xf32> {tf.aliasing_output = 1 : i32}, "
                   "%1: tensor<6xf32> {jax.buffer_donor = true})"),
            std::string::npos)
      << m;
  // A donated module is not marked twice by with_donated_params.
  EXPECT_EQ(with_donated_params(m, {0, 1}), m);
  // Only a donated parameter, and only as the type it is taken as.
  EXPECT_THROW(b.alias_result(0, 1, {ElementType::kF32, {6}}), TypeError);
  Builder plain;
  Value z = plain.parameter({ElementType::kF32, {6}});
  plain.set_results({plain.neg(z)});
  EXPECT_THROW(plain.alias_result(0, 0, z.type()), TypeError);
}

TEST(HloGolden, DonatedParamsMarkedInAPrintedModuleAsTheBuilderMarksThem) {
  auto program = [](std::vector<size_t> donated) {
    Builder b;
    Value x = b.parameter({ElementType::kI64, {2}});
    Value y = b.parameter({ElementType::kF32, {}});
    Value z = b.parameter({ElementType::kI64, {2}});
    for (size_t i : donated) b.set_donated(i);
    b.set_results({b.add(x, z), b.neg(y)});
    return b.module();
  };
  std::string plain = program({});
  EXPECT_EQ(with_donated_params(plain, {}), plain);
  EXPECT_EQ(with_donated_params(plain, {0, 2}), program({0, 2}));
  EXPECT_EQ(with_donated_params(plain, {1}), program({1}));
  EXPECT_EQ(with_donated_params(program({2}), {0, 2}), program({0, 2}));  // marked once
  EXPECT_THROW(with_donated_params(plain, {3}), TypeError);
}

// The printed attribute of a scalar constant, e.g. "dense<0x3F80> : tensor<bf16>".
std::string literal(Value v, const Builder& b) {
  std::string m = b.module();
  auto start = m.find("{value = ");
  auto end = m.find("}", start);
  EXPECT_NE(start, std::string::npos) << m;
  return m.substr(start + 9, end - start - 9);
}

std::string constant_text(ElementType t, double v) {
  Builder b;
  Value c = b.constant(t, v);
  b.set_results({c});
  return literal(c, b);
}

std::string constant_int_text(ElementType t, int64_t v) {
  Builder b;
  Value c = b.constant_int(t, v);
  b.set_results({c});
  return literal(c, b);
}

TEST(HloConstants, FloatsAreHexBits) {
  EXPECT_EQ(constant_text(F32, 1.0), "dense<0x3F800000> : tensor<f32>");
  EXPECT_EQ(constant_text(F32, -2.5), "dense<0xC0200000> : tensor<f32>");
  EXPECT_EQ(constant_text(ElementType::kF64, 1.0), "dense<0x3FF0000000000000> : tensor<f64>");
  EXPECT_EQ(constant_text(F32, std::numeric_limits<double>::infinity()),
            "dense<0x7F800000> : tensor<f32>");
  EXPECT_EQ(constant_text(F32, -0.0), "dense<0x80000000> : tensor<f32>");
}

TEST(HloConstants, Bfloat16RoundsToNearestEven) {
  const ElementType BF16 = ElementType::kBF16;
  EXPECT_EQ(constant_text(BF16, 1.0), "dense<0x3F80> : tensor<bf16>");
  EXPECT_EQ(constant_text(BF16, -2.5), "dense<0xC020> : tensor<bf16>");
  EXPECT_EQ(constant_text(BF16, 1.0 + 1.0 / 256), "dense<0x3F80> : tensor<bf16>");  // tie, even
  EXPECT_EQ(constant_text(BF16, 1.0 + 3.0 / 256), "dense<0x3F82> : tensor<bf16>");  // tie, up
  EXPECT_EQ(constant_text(BF16, std::nan("")), "dense<0x7FC0> : tensor<bf16>");
  EXPECT_EQ(constant_text(BF16, -std::numeric_limits<double>::infinity()),
            "dense<0xFF80> : tensor<bf16>");
}

TEST(HloConstants, Float16IncludesSubnormalsAndOverflow) {
  const ElementType F16 = ElementType::kF16;
  EXPECT_EQ(constant_text(F16, 1.0), "dense<0x3C00> : tensor<f16>");
  EXPECT_EQ(constant_text(F16, -2.5), "dense<0xC100> : tensor<f16>");
  EXPECT_EQ(constant_text(F16, 65504.0), "dense<0x7BFF> : tensor<f16>");     // largest
  EXPECT_EQ(constant_text(F16, 1e5), "dense<0x7C00> : tensor<f16>");         // inf
  EXPECT_EQ(constant_text(F16, std::ldexp(1.0, -24)), "dense<0x0001> : tensor<f16>");
  EXPECT_EQ(constant_text(F16, 1.0 + 1.0 / 2048), "dense<0x3C00> : tensor<f16>");  // tie, even
  EXPECT_EQ(constant_text(F16, 1.0 + 3.0 / 2048), "dense<0x3C02> : tensor<f16>");  // tie, up
}

TEST(HloConstants, IntegersAndPredicates) {
  EXPECT_EQ(constant_int_text(ElementType::kI32, -5), "dense<-5> : tensor<i32>");
  EXPECT_EQ(constant_int_text(ElementType::kI8, -128), "dense<-128> : tensor<i8>");
  EXPECT_EQ(constant_int_text(ElementType::kI64, std::numeric_limits<int64_t>::min()),
            "dense<-9223372036854775808> : tensor<i64>");
  EXPECT_EQ(constant_int_text(ElementType::kU8, 255), "dense<255> : tensor<ui8>");
  EXPECT_EQ(constant_text(ElementType::kI16, -7.0), "dense<-7> : tensor<i16>");
  EXPECT_EQ(constant_text(ElementType::kPred, 2.0), "dense<true> : tensor<i1>");
  EXPECT_EQ(constant_text(ElementType::kPred, 0.0), "dense<false> : tensor<i1>");
  EXPECT_EQ(constant_int_text(F32, 3), "dense<0x40400000> : tensor<f32>");
}

// A negative value in an unsigned type should wrap modulo 2^bits, as a cast
// to uint8 does in PyTorch; constant_bits prints the raw 64-bit pattern.
TEST(HloConstants, NegativeIntoUnsignedWraps) {
  EXPECT_EQ(constant_int_text(ElementType::kU8, -1), "dense<255> : tensor<ui8>");
}

TEST(HloConstants, I64VectorAndFull) {
  Builder b;
  Value v = b.constant_i64_vector({3, -1});
  Value f = b.full({ElementType::kI32, {2}}, 7);
  b.set_results({v, f});
  std::string m = b.module();
  EXPECT_NE(m.find("{value = dense<[3, -1]> : tensor<2xi64>}"), std::string::npos) << m;
  EXPECT_NE(m.find("{value = dense<7> : tensor<i32>} : () -> tensor<i32>\n"
                   "    %2 = \"stablehlo.broadcast_in_dim\"(%1) {broadcast_dimensions = "
                   "array<i64>} : (tensor<i32>) -> tensor<2xi32>"),
            std::string::npos)
      << m;
}

// ---- type errors ------------------------------------------------------------

TEST(HloTypeErrors, BinaryOperandsMustMatch) {
  Builder b;
  Value f = b.parameter({F32, {2}});
  Value g = b.parameter({F32, {3}});
  Value i = b.parameter({ElementType::kI32, {2}});
  EXPECT_THROW(b.add(f, g), TypeError);
  EXPECT_THROW(b.mul(f, i), TypeError);
  EXPECT_THROW(b.compare(Compare::kEQ, f, i), TypeError);
  try {
    b.sub(f, i);
    FAIL() << "expected TypeError";
  } catch (const TypeError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("stablehlo.subtract"), std::string::npos) << what;
    EXPECT_NE(what.find("tensor<2xf32>"), std::string::npos) << what;
    EXPECT_NE(what.find("tensor<2xi32>"), std::string::npos) << what;
  }
  EXPECT_EQ(b.num_ops(), 0u);  // nothing was emitted by the failed calls
}

TEST(HloTypeErrors, SelectAndClamp) {
  Builder b;
  Value f = b.parameter({F32, {2}});
  Value g = b.parameter({F32, {3}});
  Value i = b.parameter({ElementType::kI32, {2}});
  Value p = b.compare(Compare::kLT, f, f);
  EXPECT_THROW(b.select(f, f, f), TypeError);  // predicate not i1
  EXPECT_THROW(b.select(p, f, i), TypeError);  // branches differ
  EXPECT_THROW(b.select(b.compare(Compare::kLT, g, g), f, f), TypeError);  // shape
  EXPECT_THROW(b.clamp(i, f, f), TypeError);
}

TEST(HloTypeErrors, ShapeOps) {
  Builder b;
  Value x = b.parameter({F32, {2, 3}});
  Value i = b.parameter({ElementType::kI32, {2, 3}});
  EXPECT_THROW(b.reshape(x, {4}), TypeError);
  EXPECT_THROW(b.broadcast_in_dim(x, {2, 4}, {0, 1}), TypeError);
  EXPECT_THROW(b.broadcast_in_dim(x, {2, 3}, {0}), TypeError);
  EXPECT_THROW(b.broadcast_to(x, {3}), TypeError);
  EXPECT_THROW(b.transpose(x, {0, 0}), TypeError);
  EXPECT_THROW(b.slice(x, {0, 0}, {3, 3}), TypeError);
  EXPECT_THROW(b.concatenate({x, i}, 0), TypeError);
  EXPECT_THROW(b.pad(x, b.constant(ElementType::kI32, 0), {0, 0}, {1, 1}), TypeError);
  EXPECT_THROW(b.iota({F32, {2}}, 1), TypeError);
  EXPECT_THROW(b.reduce_precision(i, 8, 7), TypeError);
}

TEST(HloTypeErrors, ContractionsAndReduce) {
  Builder b;
  Value x = b.parameter({F32, {2, 3}});
  Value y = b.parameter({F32, {4, 5}});
  EXPECT_THROW(b.dot_general(x, y, {}, {}, {1}, {0}, F32), TypeError);
  EXPECT_THROW(b.dot_general(x, y, {0}, {}, {1}, {0}, F32), TypeError);
  auto sum = [](Builder& r, const Values& a) { return Values{r.add(a[0], a[1])}; };
  EXPECT_THROW(b.reduce({x, y}, {b.constant(F32, 0)}, {0}, sum), TypeError);
  EXPECT_THROW(b.reduce({x, y}, {b.constant(F32, 0), b.constant(F32, 0)}, {0}, sum),
               TypeError);
}

// Builds sum(x * k) over dim `dim`; `k` and `dim` vary the program.
void reduce_program(Builder& b, double k, int64_t dim, bool donate) {
  Value x = b.parameter({F32, {2, 3}});
  Value y = b.mul(x, b.full({F32, {2, 3}}, k));
  auto sum = [](Builder& r, const Values& a) { return Values{r.add(a[0], a[1])}; };
  b.set_results(b.reduce({y}, {b.constant(F32, 0)}, {dim}, sum));
  if (donate) b.set_donated(0);
}

TEST(HloFingerprint, EqualProgramsEqualDigestsAndEveryPrintedChangeCounts) {
  auto digest = [](double k, int64_t dim, bool donate) {
    Builder b;
    reduce_program(b, k, dim, donate);
    return std::make_pair(b.fingerprint(), b.module());
  };
  auto base = digest(2, 0, false);
  EXPECT_EQ(digest(2, 0, false).first, base.first);
  for (auto other : {digest(3, 0, false), digest(2, 1, false), digest(2, 0, true)}) {
    ASSERT_NE(other.second, base.second);
    EXPECT_FALSE(other.first == base.first);
  }
  Builder taken;
  reduce_program(taken, 2, 0, false);
  taken.take_parameter_as(0, {F32, {3, 2}});
  ASSERT_NE(taken.module(), base.second);
  EXPECT_FALSE(taken.fingerprint() == base.first);
  // Aliased to its result, a donor prints and digests otherwise.
  auto negated = [](bool alias) {
    Builder b;
    Value x = b.parameter({F32, {2, 3}});
    b.set_donated(0);
    if (alias) b.alias_result(0, 0, x.type());
    b.set_results({b.neg(x)});
    return std::make_pair(b.fingerprint(), b.module());
  };
  ASSERT_NE(negated(true).second, negated(false).second);
  EXPECT_FALSE(negated(true).first == negated(false).first);
}

TEST(HloFingerprint, ClearStartsOverWithTheSameDigest) {
  Builder fresh, reused;
  reduce_program(fresh, 2, 0, false);
  reduce_program(reused, 5, 1, true);
  reused.clear();
  EXPECT_EQ(reused.num_ops(), 0u);
  reduce_program(reused, 2, 0, false);
  EXPECT_EQ(reused.fingerprint(), fresh.fingerprint());
  EXPECT_EQ(reused.module(), fresh.module());
}

TEST(HloRegions, AFailedBodyLeavesTheEnclosingBlockCurrent) {
  Builder b;
  Value x = b.parameter({F32, {2}});
  auto bad = [](Builder& r, const Values& a) -> Values {
    r.add(a[0], a[1]);
    throw TypeError("body failed");
  };
  EXPECT_THROW(b.reduce({x}, {b.constant(F32, 0)}, {0}, bad), TypeError);
  Value y = b.neg(x);
  b.set_results({y});
  std::string text = b.module();
  // The negation lands in the function body, right before the return.
  EXPECT_NE(text.find("stablehlo.negate\"(%0) : (tensor<2xf32>) -> tensor<2xf32>\n    \"func.return\""),
            std::string::npos)
      << text;
}

TEST(HloTypes, Spelling) {
  EXPECT_EQ((TensorType{ElementType::kU8, {}}).str(), "tensor<ui8>");
  EXPECT_EQ((TensorType{ElementType::kC64, {0, 2}}).str(), "tensor<0x2xcomplex<f32>>");
  EXPECT_EQ((TensorType{ElementType::kPred, {3}}).numel(), 3);
  EXPECT_EQ((TensorType{F32, {}}).numel(), 1);
  EXPECT_EQ(bit_width(ElementType::kPred), 8);
  EXPECT_TRUE(is_unsigned(ElementType::kU64));
  EXPECT_FALSE(is_integer(ElementType::kPred));
  EXPECT_EQ(Builder::i64_array({}), "array<i64>");
  EXPECT_EQ(Builder::i64_dense({1, 2}), "dense<[1, 2]> : tensor<2xi64>");
}

}  // namespace
}  // namespace torch_tpu::hlo

namespace torch_tpu::hlo {
namespace {

// Run-time checks: recorded with the caller's tag at top level only, never
// when turned off, and their condition must be an i1 scalar.
TEST(HloChecks, RecordedAtTopLevelWithTheirTag) {
  Builder b;
  Value x = b.parameter({F32, {4}});
  Value bad = b.compare(Compare::kLT, b.slice(x, {0}, {1}), b.full({F32, {1}}, 0));
  b.set_check_tag(7);
  b.check(b.reshape(bad, {}), "negative", false);
  ASSERT_EQ(b.checks().size(), 1u);
  EXPECT_EQ(b.checks()[0].tag, 7);
  EXPECT_EQ(b.checks()[0].message, "negative");
  EXPECT_FALSE(b.checks()[0].index_error);
  EXPECT_THROW(b.check(bad, "not a scalar"), TypeError);
  b.set_checks_enabled(false);
  b.check(b.reshape(bad, {}), "off");
  EXPECT_EQ(b.checks().size(), 1u);
  b.set_checks_enabled(true);
  // Inside a region a check could not become a result: it is not made.
  b.reduce({x}, {b.constant(F32, 0)}, {0}, [](Builder& r, const Values& a) -> Values {
    r.check(r.compare(Compare::kLT, a[0], a[1]), "inside");
    return {r.add(a[0], a[1])};
  });
  EXPECT_EQ(b.checks().size(), 1u);
  b.clear();
  EXPECT_TRUE(b.checks().empty());
}

}  // namespace
}  // namespace torch_tpu::hlo
