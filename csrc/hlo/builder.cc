#include "builder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <span>
#include <unordered_map>

namespace torch_tpu::hlo {

namespace {

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s;
}

std::string type_list(const std::vector<TensorType>& types) {
  std::string s;
  for (size_t i = 0; i < types.size(); ++i) {
    if (i) s += ", ";
    s += types[i].str();
  }
  return s;
}

[[noreturn]] void fail(const std::string& op, const std::string& why) {
  throw TypeError(op + ": " + why);
}

std::string shape_str(const std::vector<int64_t>& s) { return "[" + join(s) + "]"; }

std::string padding_dense(const std::vector<std::pair<int64_t, int64_t>>& p) {
  std::string s = "dense<[";
  for (size_t i = 0; i < p.size(); ++i) {
    if (i) s += ", ";
    s += "[" + std::to_string(p[i].first) + ", " + std::to_string(p[i].second) + "]";
  }
  s += "]> : tensor<" + std::to_string(p.size()) + "x2xi64>";
  if (p.empty()) s = "dense<> : tensor<0x2xi64>";
  return s;
}

// MLIR hex spelling of a scalar's bits for a float type of `width` bits.
std::string hex_bits(uint64_t bits, int width) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%0*llX", width / 4,
                static_cast<unsigned long long>(bits));
  return buf;
}

uint64_t float_bits(ElementType t, double v) {
  float f = static_cast<float>(v);
  uint32_t u32;
  std::memcpy(&u32, &f, 4);
  switch (t) {
    case ElementType::kF64: {
      uint64_t u;
      std::memcpy(&u, &v, 8);
      return u;
    }
    case ElementType::kF32:
      return u32;
    case ElementType::kBF16: {
      if (std::isnan(f)) return 0x7FC0;
      uint32_t rounding = 0x7FFF + ((u32 >> 16) & 1);  // round to nearest even
      return (u32 + rounding) >> 16;
    }
    case ElementType::kF16: {
      // IEEE half, round to nearest even, with subnormals, inf and nan.
      uint32_t sign = (u32 >> 16) & 0x8000;
      if (std::isnan(f)) return sign | 0x7E00;
      float a = std::fabs(f);
      if (a >= 65520.0f) return sign | 0x7C00;
      if (a < 6.103515625e-05f) {  // subnormal half: multiples of 2^-24
        uint32_t m = static_cast<uint32_t>(std::nearbyint(a * 16777216.0f));
        return sign | m;
      }
      uint32_t e = ((u32 >> 23) & 0xFF) - 127 + 15;
      uint32_t m = u32 & 0x7FFFFF;
      uint32_t half = (e << 10) | (m >> 13);
      uint32_t rest = m & 0x1FFF;
      if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
      return sign | half;
    }
    default:
      return 0;
  }
}

// The canonical copy of an op name (see Builder::Op). Each thread remembers
// the names it interned; the shared table's lock is taken once per name.
const std::string* intern_name(std::string_view name) {
  thread_local std::unordered_map<std::string_view, const std::string*> known;
  auto hit = known.find(name);
  if (hit != known.end()) return hit->second;
  static std::mutex mu;
  static std::unordered_map<std::string_view, std::unique_ptr<std::string>> table;
  const std::string* canonical;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = table.find(name);
    if (it == table.end()) {
      auto owned = std::make_unique<std::string>(name);
      it = table.emplace(std::string_view(*owned), std::move(owned)).first;
    }
    canonical = it->second.get();
  }
  known.emplace(std::string_view(*canonical), canonical);
  return canonical;
}

// Two 64-bit lanes of multiply-xorshift mixing: a 128-bit digest.
struct Digest {
  Fingerprint& f;
  void add(uint64_t w) {
    f.a = (f.a ^ w) * 0xFF51AFD7ED558CCDull;
    f.a ^= f.a >> 32;
    f.b = (f.b + w) * 0xC4CEB9FE1A85EC53ull;
    f.b ^= f.b >> 29;
    f.b = (f.b << 17) | (f.b >> 47);
  }
  void add(const void* p) { add(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p))); }
  void add(std::string_view s) {
    add(s.size());
    uint64_t w = 0;
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      std::memcpy(&w, s.data() + i, 8);
      add(w);
    }
    w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    add(w);
  }
};

constexpr Fingerprint kEmptyDigest{0x9E3779B97F4A7C15ull, 0xD6E8FEB86659FD93ull};

}  // namespace

std::string Builder::i64_array(const std::vector<int64_t>& v) {
  return v.empty() ? "array<i64>" : "array<i64: " + join(v) + ">";
}

std::string Builder::i64_dense(const std::vector<int64_t>& v) {
  return "dense<[" + join(v) + "]> : tensor<" + std::to_string(v.size()) + "xi64>";
}

Builder::Builder() : running_(kEmptyDigest) {
  blocks_.emplace_back();
  insertion_.push_back(0);
}

void Builder::clear() {
  types_.clear();
  reshapes_.clear();
  transposes_.clear();
  constants_.clear();
  splats_.clear();
  operands_.clear();
  blocks_.resize(1);
  blocks_[0].args.clear();
  blocks_[0].ops.clear();
  insertion_.assign(1, 0);
  params_.clear();
  results_.clear();
  donated_.clear();
  taken_as_.clear();
  aliased_.clear();
  checks_.clear();
  kernels_.clear();
  num_ops_ = 0;
  running_ = kEmptyDigest;
}

Value Builder::new_value(const TensorType& type) {
  const TensorType* t = intern(type);
  types_.push_back(t);
  reshapes_.emplace_back();
  return Value(static_cast<int>(types_.size()) - 1, t);
}

Value Builder::parameter(const TensorType& type) {
  if (insertion_.size() != 1) fail("parameter", "only the function body takes parameters");
  Value v = new_value(type);
  Digest d{running_};
  d.add(uint64_t{0x50});  // 'P'
  d.add(&v.type());
  blocks_[0].args.push_back(v.id());
  params_.push_back(v);
  donated_.push_back(false);
  taken_as_.push_back(nullptr);
  aliased_.push_back(-1);
  return v;
}

void Builder::set_donated(size_t index) { donated_.at(index) = true; }

void Builder::take_parameter_as(size_t index, const TensorType& type) {
  const TensorType& declared = params_.at(index).type();
  if (type.dtype != declared.dtype || type.numel() != declared.numel())
    fail("take_parameter_as", "parameter " + std::to_string(index) + " is " + declared.str() +
                                  ", not the same elements as " + type.str());
  taken_as_[index] = type == declared ? nullptr : intern(type);
}

void Builder::alias_result(size_t index, size_t result, const TensorType& type) {
  const TensorType& taken = taken_as_.at(index) ? *taken_as_[index] : params_[index].type();
  if (!donated_[index] || !(type == taken))
    fail("alias_result", "parameter " + std::to_string(index) + " is " + taken.str() +
                             (donated_[index] ? "" : ", not donated") + "; result " +
                             std::to_string(result) + " is " + type.str());
  aliased_[index] = static_cast<int>(result);
}

void Builder::check(Value violated, std::string message, bool index_error) {
  // A condition inside a region (a loop body) cannot become a result.
  if (!checks_enabled_ || insertion_.size() != 1) return;
  if (!(violated.type() == TensorType{ElementType::kPred, {}}))
    throw TypeError("check: expected an i1 scalar condition, got " + violated.type().str());
  checks_.push_back(Check{violated, std::move(message), check_tag_, index_error});
}

void Builder::set_results(const Values& results) { results_ = results; }

int Builder::append(std::string_view name, const Value* operands, size_t num_operands,
                    const TensorType* const* result_types, size_t num_results,
                    std::string attributes, std::vector<int> regions, bool interned) {
  int first_operand = static_cast<int>(operands_.size());
  for (size_t i = 0; i < num_operands; ++i) {
    if (!operands[i].valid()) {
      operands_.resize(first_operand);
      fail(std::string(name), "operand is not a value of this builder");
    }
    operands_.push_back(operands[i].id());
  }
  int first_result = static_cast<int>(types_.size());
  for (size_t i = 0; i < num_results; ++i) {
    if (interned) {
      types_.push_back(result_types[i]);
      reshapes_.emplace_back();
    } else
      new_value(*result_types[i]);
  }
  const std::string* interned_name = intern_name(name);
  Digest d{running_};
  d.add(static_cast<uint64_t>(insertion_.back()) << 32 | 0x4F);  // 'O' in this block
  d.add(interned_name);
  d.add(static_cast<uint64_t>(num_operands) << 32 | num_results);
  for (size_t i = 0; i < num_operands; ++i) d.add(operands[i].id());
  for (size_t i = 0; i < num_results; ++i) d.add(types_[first_result + i]);
  d.add(std::string_view(attributes));
  d.add(regions.size());
  for (int r : regions) d.add(r);
  blocks_[insertion_.back()].ops.push_back(
      Op{interned_name, first_operand, static_cast<int>(num_operands), first_result,
         static_cast<int>(num_results), std::move(attributes), std::move(regions)});
  ++num_ops_;
  return first_result;
}

Values Builder::emit(std::string_view name, const Values& operands,
                     const std::vector<TensorType>& result_types, std::string attributes,
                     std::vector<int> regions) {
  std::vector<const TensorType*> types;
  types.reserve(result_types.size());
  for (const TensorType& t : result_types) types.push_back(&t);
  int first = append(name, operands.data(), operands.size(), types.data(), types.size(),
                     std::move(attributes), std::move(regions));
  Values results;
  results.reserve(result_types.size());
  for (size_t i = 0; i < result_types.size(); ++i)
    results.push_back(Value(first + static_cast<int>(i), types_[first + i]));
  return results;
}

Value Builder::emit1(std::string_view name, std::initializer_list<Value> operands,
                     const TensorType& result, std::string attributes) {
  const TensorType* type = &result;
  int id = append(name, operands.begin(), operands.size(), &type, 1, std::move(attributes), {});
  return Value(id, types_[id]);
}

Value Builder::emit_like(std::string_view name, std::initializer_list<Value> operands, Value like,
                         std::string attributes) {
  const TensorType* type = &like.type();
  int id = append(name, operands.begin(), operands.size(), &type, 1, std::move(attributes), {},
                  /*interned=*/true);
  return Value(id, type);
}

Values Builder::op(std::string_view name, const Values& operands,
                   const std::vector<TensorType>& result_types, std::string attributes) {
  return emit(name, operands, result_types, std::move(attributes));
}

Values Builder::call(const KernelPtr& kernel, const Values& args) {
  if (args.size() != kernel->parameters.size())
    throw TypeError("the kernel @" + kernel->entry + " takes " +
                    std::to_string(kernel->parameters.size()) + " tensors, called with " +
                    std::to_string(args.size()));
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].type() != kernel->parameters[i])
      throw TypeError("the kernel's parameter " + std::to_string(i) + " is " +
                      kernel->parameters[i].str() + ", called with " + args[i].type().str());
  bool known = std::any_of(kernels_.begin(), kernels_.end(),
                           [&](const KernelPtr& k) { return k->entry == kernel->entry; });
  if (!known) kernels_.push_back(kernel);
  return emit("func.call", args, kernel->results, "{callee = @" + kernel->entry + "}");
}

int Builder::region(const std::vector<TensorType>& arg_types, const RegionFn& body) {
  blocks_.emplace_back();
  int index = static_cast<int>(blocks_.size()) - 1;
  Values args;
  Digest d{running_};
  d.add(static_cast<uint64_t>(index) << 32 | 0x52);  // 'R'
  for (const TensorType& t : arg_types) {
    Value v = new_value(t);
    d.add(&v.type());
    blocks_[index].args.push_back(v.id());
    args.push_back(v);
  }
  insertion_.push_back(index);
  Values yielded;
  try {
    yielded = body(*this, args);
  } catch (...) {
    insertion_.pop_back();  // a failed body leaves later ops in the enclosing block
    throw;
  }
  append("stablehlo.return", yielded.data(), yielded.size(), nullptr, 0, {}, {});
  insertion_.pop_back();
  return index;
}

// ---- constants ------------------------------------------------------------

Value Builder::constant_bits(ElementType dtype, uint64_t bits) {
  MemoKey key{static_cast<uint64_t>(insertion_.back()) << 8 | static_cast<uint64_t>(dtype), bits};
  if (auto it = constants_.find(key); it != constants_.end())
    return Value(it->second, types_[it->second]);
  TensorType t{dtype, {}};
  std::string literal;
  if (dtype == ElementType::kPred) {
    literal = bits ? "true" : "false";
  } else if (is_float(dtype)) {
    literal = hex_bits(bits, bit_width(dtype));
  } else if (is_unsigned(dtype)) {
    int w = bit_width(dtype);
    literal = std::to_string(w == 64 ? bits : bits & ((uint64_t{1} << w) - 1));
  } else if (is_integer(dtype)) {
    int w = bit_width(dtype);
    int64_t v = static_cast<int64_t>(bits << (64 - w)) >> (64 - w);
    literal = std::to_string(v);
  } else {
    fail("constant", std::string("unsupported element type ") + mlir_name(dtype));
  }
  Value c = emit1("stablehlo.constant", {}, t, "{value = dense<" + literal + "> : " + t.str() + "}");
  constants_.emplace(key, c.id());
  return c;
}

Value Builder::constant(ElementType dtype, double value) {
  if (is_float(dtype)) return constant_bits(dtype, float_bits(dtype, value));
  if (dtype == ElementType::kPred) return constant_bits(dtype, value != 0.0);
  if (is_complex(dtype)) {
    ElementType part = dtype == ElementType::kC64 ? ElementType::kF32 : ElementType::kF64;
    TensorType t{dtype, {}};
    Value re = constant(part, value);
    Value im = constant(part, 0.0);
    return emit("stablehlo.complex", {re, im}, {t}, "")[0];
  }
  return constant_int(dtype, static_cast<int64_t>(value));
}

Value Builder::constant_int(ElementType dtype, int64_t value) {
  if (is_float(dtype) || is_complex(dtype)) return constant(dtype, static_cast<double>(value));
  return constant_bits(dtype, static_cast<uint64_t>(value));
}

Value Builder::constant_i64_vector(const std::vector<int64_t>& values) {
  TensorType t{ElementType::kI64, {static_cast<int64_t>(values.size())}};
  std::string lit = values.empty() ? "dense<>" : "dense<[" + join(values) + "]>";
  return emit("stablehlo.constant", {}, {t}, "{value = " + lit + " : " + t.str() + "}")[0];
}

Value Builder::full(const TensorType& type, double value) {
  return broadcast_in_dim(constant(type.dtype, value), type.shape, {});
}

Value Builder::iota(const TensorType& type, int64_t dim) {
  if (dim < 0 || dim >= type.rank()) fail("iota", "dimension out of range");
  return emit("stablehlo.iota", {}, {type},
              "{iota_dimension = " + std::to_string(dim) + " : i64}")[0];
}

// ---- elementwise ------------------------------------------------------------

Value Builder::binary(std::string_view name, Value a, Value b) {
  if (&a.type() != &b.type() && a.type() != b.type())
    fail(std::string(name), "operand types differ: " + a.type().str() + " vs " + b.type().str());
  return emit_like(name, {a, b}, a);
}

Value Builder::unary(std::string_view name, Value x) { return emit_like(name, {x}, x); }

Value Builder::abs(Value x) {
  // stablehlo.abs takes signless integers only: an unsigned value is its own.
  if (is_unsigned(x.dtype()) || x.dtype() == ElementType::kPred) return x;
  TensorType t = x.type();
  if (t.dtype == ElementType::kC64) t.dtype = ElementType::kF32;
  if (t.dtype == ElementType::kC128) t.dtype = ElementType::kF64;
  return emit("stablehlo.abs", {x}, {t}, "")[0];
}

Value Builder::is_finite(Value x) {
  TensorType t{ElementType::kPred, x.shape()};
  return emit("stablehlo.is_finite", {x}, {t}, "")[0];
}

Value Builder::compare(Compare direction, Value a, Value b) {
  static const char* names[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  if (a.type() != b.type())
    fail("compare", "operand types differ: " + a.type().str() + " vs " + b.type().str());
  TensorType t{ElementType::kPred, a.shape()};
  std::string attrs = std::string("{comparison_direction = #stablehlo<comparison_direction ") +
                      names[static_cast<int>(direction)] + ">";
  // Explicit for every type: XLA:CPU's constant folding has read an i64
  // compare without one as unsigned (tril(1x1, -1) kept its element).
  if (is_float(a.dtype()))
    attrs += ", compare_type = #stablehlo<comparison_type FLOAT>";
  else if (is_complex(a.dtype()))
    ;  // EQ/NE only; the type is implied
  else if (is_unsigned(a.dtype()) || a.dtype() == ElementType::kPred)
    attrs += ", compare_type = #stablehlo<comparison_type UNSIGNED>";
  else
    attrs += ", compare_type = #stablehlo<comparison_type SIGNED>";
  attrs += "}";
  return emit1("stablehlo.compare", {a, b}, t, std::move(attrs));
}

Value Builder::select(Value pred, Value on_true, Value on_false) {
  if (pred.dtype() != ElementType::kPred) fail("select", "predicate must be i1");
  if (on_true.type() != on_false.type())
    fail("select", "branch types differ: " + on_true.type().str() + " vs " +
                       on_false.type().str());
  if (pred.rank() != 0 && pred.shape() != on_true.shape())
    fail("select", "predicate shape " + shape_str(pred.shape()) + " != " +
                       shape_str(on_true.shape()));
  return emit_like("stablehlo.select", {pred, on_true, on_false}, on_true);
}

Value Builder::clamp(Value lo, Value x, Value hi) {
  for (Value b : {lo, hi})
    if (b.dtype() != x.dtype() || (b.rank() != 0 && b.shape() != x.shape()))
      fail("clamp", "bound " + b.type().str() + " does not fit " + x.type().str());
  return emit_like("stablehlo.clamp", {lo, x, hi}, x);
}

Value Builder::convert(Value x, ElementType dtype) {
  if (x.dtype() == dtype) return x;
  return emit1("stablehlo.convert", {x}, TensorType{dtype, x.shape()});
}

Value Builder::convert_as_written(Value x, ElementType dtype) {
  return emit1("stablehlo.convert", {x}, TensorType{dtype, x.shape()});
}

void Builder::mark_bf16_split(Value x, int group) {
  auto& ops = blocks_[insertion_.back()].ops;
  for (auto it = ops.rbegin(); it != ops.rend(); ++it)
    if (Op& op = *it; op.first_result <= x.id() && x.id() < op.first_result + op.num_results) {
      if (op.bf16_split >= 0) return;
      op.bf16_split = group;
      Digest d{running_};
      d.add(static_cast<uint64_t>(x.id()) << 32 | 0x53);  // 'S'
      d.add(static_cast<uint64_t>(group));
      return;
    }
  fail("mark_bf16_split", "value is not made by an op of the current block");
}

Value Builder::bitcast_convert(Value x, const TensorType& type) {
  return emit("stablehlo.bitcast_convert", {x}, {type}, "")[0];
}

Value Builder::reduce_precision(Value x, int exponent_bits, int mantissa_bits) {
  if (!is_float(x.dtype())) fail("reduce_precision", "operand must be floating point");
  return emit("stablehlo.reduce_precision", {x}, {x.type()},
              "{exponent_bits = " + std::to_string(exponent_bits) +
                  " : i32, mantissa_bits = " + std::to_string(mantissa_bits) + " : i32}")[0];
}

// ---- shape ------------------------------------------------------------------

Value Builder::reshape(Value x, const std::vector<int64_t>& shape) {
  return reshape(x, shape.data(), shape.size());
}

Value Builder::reshape(Value x, const int64_t* dims, size_t rank) {
  std::span<const int64_t> shape(dims, rank);
  auto is = [&](const std::vector<int64_t>& s) { return std::ranges::equal(s, shape); };
  if (is(x.shape())) return x;
  auto to = [&] { return TensorType{x.dtype(), {shape.begin(), shape.end()}}; };
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (numel != x.type().numel()) fail("reshape", "cannot reshape " + x.type().str() + " to " + to().str());
  if (insertion_.size() > 1) return emit1("stablehlo.reshape", {x}, to());
  if (int source = reshapes_[x.id()].source; source >= 0) {  // reshape(reshape(v)) = reshape(v)
    x = Value(source, types_[source]);
    if (is(x.shape())) return x;
  }
  if (int latest = reshapes_[x.id()].latest; latest >= 0 && is(types_[latest]->shape))
    return Value(latest, types_[latest]);
  Value r = emit1("stablehlo.reshape", {x}, to());
  reshapes_[r.id()].source = x.id();
  reshapes_[x.id()].latest = r.id();
  return r;
}

Value Builder::broadcast_in_dim(Value x, const std::vector<int64_t>& shape,
                                const std::vector<int64_t>& dims) {
  if (static_cast<int64_t>(dims.size()) != x.rank())
    fail("broadcast_in_dim", "need one dimension per operand dimension");
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0 || dims[i] >= static_cast<int64_t>(shape.size()))
      fail("broadcast_in_dim", "dimension out of range");
    if (x.dim(i) != 1 && x.dim(i) != shape[dims[i]])
      fail("broadcast_in_dim", "cannot broadcast " + x.type().str() + " to " +
                                   shape_str(shape));
  }
  if (x.shape() == shape) {
    bool identity = true;
    for (size_t i = 0; i < dims.size(); ++i) identity &= dims[i] == static_cast<int64_t>(i);
    if (identity) return x;
  }
  if (x.rank() == 0) {  // a splat: one per (block, value, type)
    const TensorType* t = intern(TensorType{x.dtype(), shape});
    MemoKey key{static_cast<uint64_t>(insertion_.back()) << 32 | static_cast<uint32_t>(x.id()),
                reinterpret_cast<uintptr_t>(t)};
    if (auto it = splats_.find(key); it != splats_.end()) return Value(it->second, t);
    Value v = emit1("stablehlo.broadcast_in_dim", {x}, *t, "{broadcast_dimensions = array<i64>}");
    splats_.emplace(key, v.id());
    return v;
  }
  return emit1("stablehlo.broadcast_in_dim", {x}, TensorType{x.dtype(), shape},
               "{broadcast_dimensions = " + i64_array(dims) + "}");
}

Value Builder::broadcast_to(Value x, const std::vector<int64_t>& shape) {
  if (x.shape() == shape) return x;  // the common case: nothing to build
  int64_t offset = static_cast<int64_t>(shape.size()) - x.rank();
  if (offset < 0) fail("broadcast_to", "cannot broadcast " + x.type().str() + " to lower rank");
  std::vector<int64_t> dims(x.rank());
  std::iota(dims.begin(), dims.end(), offset);
  return broadcast_in_dim(x, shape, dims);
}

Value Builder::transpose(Value x, const std::vector<int64_t>& perm) {
  if (static_cast<int64_t>(perm.size()) != x.rank()) fail("transpose", "bad permutation");
  bool unchanged = true;
  for (size_t i = 0; i < perm.size(); ++i) unchanged &= perm[i] == static_cast<int64_t>(i);
  if (unchanged) return x;
  std::vector<int64_t> shape(perm.size());
  std::vector<bool> seen(perm.size());
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] < 0 || perm[i] >= x.rank() || seen[perm[i]]) fail("transpose", "bad permutation");
    seen[perm[i]] = true;
    shape[i] = x.dim(perm[i]);
    identity &= perm[i] == static_cast<int64_t>(i);
  }
  if (identity) return x;
  Value source;
  std::vector<int64_t> inner;
  if (transposed(x, &source, &inner)) {  // transpose(transpose(v)) = one transpose of v
    std::vector<int64_t> both(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) both[i] = inner[perm[i]];
    return transpose(source, both);
  }
  Value r = emit1("stablehlo.transpose", {x}, TensorType{x.dtype(), shape},
                  "{permutation = " + i64_array(perm) + "}");
  if (insertion_.size() == 1) {
    reshapes_[r.id()].transpose = static_cast<int>(transposes_.size());
    transposes_.emplace_back(x.id(), perm);
  }
  return r;
}

bool Builder::transposed(Value v, Value* source, std::vector<int64_t>* perm) const {
  // Only in the function body: a region must not reach a value it was not given.
  if (insertion_.size() != 1 || !v.valid() || v.id() >= static_cast<int>(reshapes_.size()))
    return false;
  int t = reshapes_[v.id()].transpose;
  if (t < 0) return false;
  const auto& [id, p] = transposes_[t];
  *source = Value(id, types_[id]);
  *perm = p;
  return true;
}

Value Builder::reshaped_from(Value v) const {
  if (insertion_.size() != 1 || !v.valid() || v.id() >= static_cast<int>(reshapes_.size())) return v;
  int source = reshapes_[v.id()].source;
  return source < 0 ? v : Value(source, types_[source]);
}

Value Builder::slice(Value x, const std::vector<int64_t>& start,
                     const std::vector<int64_t>& limit,
                     const std::vector<int64_t>& strides_in) {
  std::vector<int64_t> strides = strides_in;
  if (strides.empty()) strides.assign(x.rank(), 1);
  if (static_cast<int64_t>(start.size()) != x.rank() ||
      static_cast<int64_t>(limit.size()) != x.rank() ||
      static_cast<int64_t>(strides.size()) != x.rank())
    fail("slice", "need one start, limit and stride per dimension");
  std::vector<int64_t> shape(x.rank());
  bool identity = true;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (start[i] < 0 || limit[i] > x.dim(i) || start[i] > limit[i] || strides[i] < 1)
      fail("slice", "bad bounds for " + x.type().str());
    shape[i] = (limit[i] - start[i] + strides[i] - 1) / strides[i];
    identity &= start[i] == 0 && limit[i] == x.dim(i) && strides[i] == 1;
  }
  if (identity) return x;
  return emit1("stablehlo.slice", {x}, TensorType{x.dtype(), shape},
               "{start_indices = " + i64_array(start) + ", limit_indices = " +
                   i64_array(limit) + ", strides = " + i64_array(strides) + "}");
}

Value Builder::dynamic_slice(Value x, const Values& starts,
                             const std::vector<int64_t>& sizes) {
  if (static_cast<int64_t>(starts.size()) != x.rank() ||
      static_cast<int64_t>(sizes.size()) != x.rank())
    fail("dynamic_slice", "need one start and size per dimension");
  Values operands{x};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return emit("stablehlo.dynamic_slice", operands, {TensorType{x.dtype(), sizes}},
              "{slice_sizes = " + i64_array(sizes) + "}")[0];
}

Value Builder::dynamic_update_slice(Value x, Value update, const Values& starts) {
  if (static_cast<int64_t>(starts.size()) != x.rank() || update.rank() != x.rank() ||
      update.dtype() != x.dtype())
    fail("dynamic_update_slice", "update " + update.type().str() + " does not fit " +
                                     x.type().str());
  Values operands{x, update};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return emit("stablehlo.dynamic_update_slice", operands, {x.type()}, "")[0];
}

Value Builder::concatenate(const Values& xs, int64_t dim) {
  if (xs.empty()) fail("concatenate", "needs at least one operand");
  if (xs.size() == 1) return xs[0];
  TensorType t = xs[0].type();
  if (dim < 0 || dim >= t.rank()) fail("concatenate", "dimension out of range");
  t.shape[dim] = 0;
  for (const Value& x : xs) {
    if (x.dtype() != t.dtype || x.rank() != t.rank())
      fail("concatenate", "operands differ in type: " + x.type().str());
    for (int64_t i = 0; i < t.rank(); ++i)
      if (i != dim && x.dim(i) != xs[0].dim(i))
        fail("concatenate", "operand shapes differ outside the dimension");
    t.shape[dim] += x.dim(dim);
  }
  return emit("stablehlo.concatenate", xs, {t},
              "{dimension = " + std::to_string(dim) + " : i64}")[0];
}

Value Builder::pad(Value x, Value padding_value, const std::vector<int64_t>& low,
                   const std::vector<int64_t>& high,
                   const std::vector<int64_t>& interior_in) {
  std::vector<int64_t> interior = interior_in;
  if (interior.empty()) interior.assign(x.rank(), 0);
  if (static_cast<int64_t>(low.size()) != x.rank() ||
      static_cast<int64_t>(high.size()) != x.rank() ||
      static_cast<int64_t>(interior.size()) != x.rank())
    fail("pad", "need one low, high and interior padding per dimension");
  if (padding_value.rank() != 0 || padding_value.dtype() != x.dtype())
    fail("pad", "padding value must be a scalar of the operand's type");
  TensorType t = x.type();
  for (int64_t i = 0; i < x.rank(); ++i) {
    int64_t n = x.dim(i);
    t.shape[i] = low[i] + high[i] + n + (n > 0 ? (n - 1) * interior[i] : 0);
    if (t.shape[i] < 0) fail("pad", "negative result size");
  }
  return emit("stablehlo.pad", {x, padding_value}, {t},
              "{edge_padding_low = " + i64_array(low) + ", edge_padding_high = " +
                  i64_array(high) + ", interior_padding = " + i64_array(interior) + "}")[0];
}

Value Builder::reverse(Value x, const std::vector<int64_t>& dims) {
  if (dims.empty()) return x;
  return emit("stablehlo.reverse", {x}, {x.type()},
              "{dimensions = " + i64_array(dims) + "}")[0];
}

// ---- contractions -----------------------------------------------------------

Value Builder::dot_general(Value lhs, Value rhs, const std::vector<int64_t>& lb,
                           const std::vector<int64_t>& rb,
                           const std::vector<int64_t>& lc,
                           const std::vector<int64_t>& rc, ElementType result_dtype,
                           const std::string& precision) {
  if (lb.size() != rb.size() || lc.size() != rc.size())
    fail("dot_general", "batch/contracting dimension lists differ in length");
  for (size_t i = 0; i < lb.size(); ++i)
    if (lhs.dim(lb[i]) != rhs.dim(rb[i])) fail("dot_general", "batch sizes differ");
  for (size_t i = 0; i < lc.size(); ++i)
    if (lhs.dim(lc[i]) != rhs.dim(rc[i]))
      fail("dot_general", "contracting sizes differ: " + lhs.type().str() + " · " +
                              rhs.type().str());
  std::vector<int64_t> shape;
  for (int64_t d : lb) shape.push_back(lhs.dim(d));
  auto free_dims = [&](Value v, const std::vector<int64_t>& b, const std::vector<int64_t>& c) {
    for (int64_t i = 0; i < v.rank(); ++i)
      if (std::find(b.begin(), b.end(), i) == b.end() &&
          std::find(c.begin(), c.end(), i) == c.end())
        shape.push_back(v.dim(i));
  };
  free_dims(lhs, lb, lc);
  free_dims(rhs, rb, rc);
  std::string attrs = "{dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [" +
                      join(lb) + "], rhs_batching_dimensions = [" + join(rb) +
                      "], lhs_contracting_dimensions = [" + join(lc) +
                      "], rhs_contracting_dimensions = [" + join(rc) + "]>";
  if (!precision.empty())
    attrs += ", precision_config = [#stablehlo<precision " + precision +
             ">, #stablehlo<precision " + precision + ">]";
  attrs += "}";
  return emit("stablehlo.dot_general", {lhs, rhs}, {TensorType{result_dtype, shape}}, attrs)[0];
}

Value Builder::convolution(Value lhs, Value rhs, const TensorType& result,
                           const ConvDims& d, const ConvOptions& o) {
  auto letters = [](int64_t batch, int64_t feature, const std::vector<int64_t>& spatial,
                    char b, char f) {
    std::vector<std::string> slots(2 + spatial.size());
    slots.at(batch) = std::string(1, b);
    slots.at(feature) = std::string(1, f);
    for (size_t i = 0; i < spatial.size(); ++i) slots.at(spatial[i]) = std::to_string(i);
    std::string s = "[";
    for (size_t i = 0; i < slots.size(); ++i) s += (i ? ", " : "") + slots[i];
    return s + "]";
  };
  std::string dims = "#stablehlo.conv<" +
                     letters(d.input_batch, d.input_feature, d.input_spatial, 'b', 'f') +
                     "x" +
                     letters(d.kernel_output_feature, d.kernel_input_feature,
                             d.kernel_spatial, 'o', 'i') +
                     "->" +
                     letters(d.output_batch, d.output_feature, d.output_spatial, 'b', 'f') +
                     ">";
  std::string attrs = "{dimension_numbers = " + dims +
                      ", feature_group_count = " + std::to_string(o.feature_group_count) +
                      " : i64, batch_group_count = " + std::to_string(o.batch_group_count) +
                      " : i64";
  if (!o.window_strides.empty()) attrs += ", window_strides = " + i64_array(o.window_strides);
  if (!o.padding.empty()) attrs += ", padding = " + padding_dense(o.padding);
  if (!o.lhs_dilation.empty()) attrs += ", lhs_dilation = " + i64_array(o.lhs_dilation);
  if (!o.rhs_dilation.empty()) attrs += ", rhs_dilation = " + i64_array(o.rhs_dilation);
  attrs += "}";
  return emit("stablehlo.convolution", {lhs, rhs}, {result}, attrs)[0];
}

// ---- regions ----------------------------------------------------------------

Values Builder::reduce(const Values& inputs, const Values& inits,
                       const std::vector<int64_t>& dims, const RegionFn& body) {
  if (inputs.empty() || inputs.size() != inits.size())
    fail("reduce", "need one init value per input");
  std::vector<TensorType> results, args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].shape() != inputs[0].shape()) fail("reduce", "inputs differ in shape");
    TensorType r{inputs[i].dtype(), {}};
    for (int64_t d = 0; d < inputs[i].rank(); ++d)
      if (std::find(dims.begin(), dims.end(), d) == dims.end())
        r.shape.push_back(inputs[i].dim(d));
    results.push_back(r);
    args.push_back(TensorType{inputs[i].dtype(), {}});
  }
  for (const Value& v : inits) args.push_back(v.type());
  // Block arguments: (acc_0..acc_n, x_0..x_n), each a scalar.
  std::vector<TensorType> block_args;
  for (size_t i = 0; i < inputs.size(); ++i) block_args.push_back(TensorType{inputs[i].dtype(), {}});
  for (size_t i = 0; i < inputs.size(); ++i) block_args.push_back(TensorType{inputs[i].dtype(), {}});
  int r = region(block_args, body);
  Values operands = inputs;
  operands.insert(operands.end(), inits.begin(), inits.end());
  return emit("stablehlo.reduce", operands, results,
              "{dimensions = " + i64_array(dims) + "}", {r});
}

Values Builder::reduce_window(const Values& inputs, const Values& inits,
                              const std::vector<int64_t>& window,
                              const std::vector<int64_t>& strides,
                              const std::vector<int64_t>& base_dilations,
                              const std::vector<int64_t>& window_dilations,
                              const std::vector<std::pair<int64_t, int64_t>>& padding,
                              const RegionFn& body) {
  if (inputs.empty() || inputs.size() != inits.size())
    fail("reduce_window", "need one init value per input");
  int64_t rank = inputs[0].rank();
  auto get = [&](const std::vector<int64_t>& v, int64_t i, int64_t dflt) {
    return v.empty() ? dflt : v.at(i);
  };
  std::vector<int64_t> shape(rank);
  for (int64_t i = 0; i < rank; ++i) {
    int64_t n = inputs[0].dim(i);
    int64_t dilated = n == 0 ? 0 : (n - 1) * get(base_dilations, i, 1) + 1;
    if (!padding.empty()) dilated += padding[i].first + padding[i].second;
    int64_t w = (window[i] - 1) * get(window_dilations, i, 1) + 1;
    int64_t s = get(strides, i, 1);
    shape[i] = dilated < w ? 0 : (dilated - w) / s + 1;
  }
  std::vector<TensorType> results, block_args;
  for (const Value& v : inputs) {
    results.push_back(TensorType{v.dtype(), shape});
    block_args.push_back(TensorType{v.dtype(), {}});
  }
  for (const Value& v : inputs) block_args.push_back(TensorType{v.dtype(), {}});
  int r = region(block_args, body);
  std::string attrs = "{window_dimensions = " + i64_array(window);
  if (!strides.empty()) attrs += ", window_strides = " + i64_array(strides);
  if (!base_dilations.empty()) attrs += ", base_dilations = " + i64_array(base_dilations);
  if (!window_dilations.empty()) attrs += ", window_dilations = " + i64_array(window_dilations);
  if (!padding.empty()) attrs += ", padding = " + padding_dense(padding);
  attrs += "}";
  Values operands = inputs;
  operands.insert(operands.end(), inits.begin(), inits.end());
  return emit("stablehlo.reduce_window", operands, results, attrs, {r});
}

Value Builder::select_and_scatter(Value operand, Value source, Value init,
                                  const std::vector<int64_t>& window,
                                  const std::vector<int64_t>& strides,
                                  const std::vector<std::pair<int64_t, int64_t>>& padding,
                                  const RegionFn& select_fn, const RegionFn& scatter_fn) {
  TensorType s{operand.dtype(), {}};
  int r1 = region({s, s}, select_fn);
  int r2 = region({s, s}, scatter_fn);
  std::string attrs = "{window_dimensions = " + i64_array(window) +
                      ", window_strides = " + i64_array(strides);
  if (!padding.empty()) attrs += ", padding = " + padding_dense(padding);
  attrs += "}";
  return emit("stablehlo.select_and_scatter", {operand, source, init}, {operand.type()},
              attrs, {r1, r2})[0];
}

Values Builder::sort(const Values& inputs, int64_t dim, bool stable,
                     const RegionFn& comparator) {
  std::vector<TensorType> results, block_args;
  for (const Value& v : inputs) {
    results.push_back(v.type());
    block_args.push_back(TensorType{v.dtype(), {}});
    block_args.push_back(TensorType{v.dtype(), {}});
  }
  int r = region(block_args, comparator);
  return emit("stablehlo.sort", inputs, results,
              "{dimension = " + std::to_string(dim) +
                  " : i64, is_stable = " + (stable ? "true" : "false") + "}",
              {r});
}

Value Builder::gather(Value operand, Value indices, const GatherDims& d,
                      const std::vector<int64_t>& slice_sizes, const TensorType& result,
                      bool indices_are_sorted) {
  std::string attrs =
      "{dimension_numbers = #stablehlo.gather<offset_dims = [" + join(d.offset_dims) +
      "], collapsed_slice_dims = [" + join(d.collapsed_slice_dims) +
      "], operand_batching_dims = [" + join(d.operand_batching_dims) +
      "], start_indices_batching_dims = [" + join(d.start_indices_batching_dims) +
      "], start_index_map = [" + join(d.start_index_map) +
      "], index_vector_dim = " + std::to_string(d.index_vector_dim) +
      ">, slice_sizes = " + i64_array(slice_sizes) +
      ", indices_are_sorted = " + (indices_are_sorted ? "true" : "false") + "}";
  return emit("stablehlo.gather", {operand, indices}, {result}, attrs)[0];
}

Value Builder::scatter(Value operand, Value indices, Value updates, const ScatterDims& d,
                       const RegionFn& update, bool indices_are_sorted,
                       bool unique_indices) {
  TensorType s{operand.dtype(), {}};
  int r = region({s, s}, update);
  std::string attrs =
      "{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [" +
      join(d.update_window_dims) + "], inserted_window_dims = [" +
      join(d.inserted_window_dims) + "], input_batching_dims = [" +
      join(d.input_batching_dims) + "], scatter_indices_batching_dims = [" +
      join(d.scatter_indices_batching_dims) + "], scatter_dims_to_operand_dims = [" +
      join(d.scatter_dims_to_operand_dims) + "], index_vector_dim = " +
      std::to_string(d.index_vector_dim) + ">, indices_are_sorted = " +
      (indices_are_sorted ? "true" : "false") +
      ", unique_indices = " + (unique_indices ? "true" : "false") + "}";
  return emit("stablehlo.scatter", {operand, indices, updates}, {operand.type()}, attrs, {r})[0];
}

Values Builder::rng_bit_generator(Value state, const TensorType& result,
                                  const std::string& algorithm) {
  return emit("stablehlo.rng_bit_generator", {state}, {state.type(), result},
              "{rng_algorithm = #stablehlo<rng_algorithm " + algorithm + ">}");
}

Value Builder::cholesky(Value a, bool lower) {
  return emit("stablehlo.cholesky", {a}, {a.type()},
              std::string("{lower = ") + (lower ? "true" : "false") + "}")[0];
}

Value Builder::triangular_solve(Value a, Value b, bool left_side, bool lower,
                                bool unit_diagonal, Transpose transpose_a) {
  static const char* names[] = {"NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"};
  if (transpose_a == Transpose::kAdjoint && !is_complex(a.dtype())) transpose_a = Transpose::kTranspose;
  auto flag = [](bool v) { return v ? "true" : "false"; };
  return emit("stablehlo.triangular_solve", {a, b}, {b.type()},
              std::string("{left_side = ") + flag(left_side) + ", lower = " + flag(lower) +
                  ", unit_diagonal = " + flag(unit_diagonal) +
                  ", transpose_a = #stablehlo<transpose " + names[static_cast<int>(transpose_a)] +
                  ">}")[0];
}

Values Builder::while_loop(const Values& init, const RegionFn& cond, const RegionFn& body) {
  std::vector<TensorType> types;
  for (const Value& v : init) types.push_back(v.type());
  int c = region(types, cond);
  int b = region(types, body);
  return emit("stablehlo.while", init, types, "", {c, b});
}

// ---- printing ---------------------------------------------------------------

namespace {
void append_id(std::string& out, int id, bool first) {
  out += first ? "%" : ", %";
  out += std::to_string(id);
}
}  // namespace

void Builder::print_block(std::string& out, const Block& block, int indent) const {
  std::string pad(indent, ' ');
  for (const Op& op : block.ops) {
    out += pad;
    for (int i = 0; i < op.num_results; ++i) append_id(out, op.first_result + i, i == 0);
    if (op.num_results) out += " = ";
    out += '"';
    out += *op.name;
    out += "\"(";
    std::string operand_types;
    for (int i = 0; i < op.num_operands; ++i) {
      int id = operands_[op.first_operand + i];
      append_id(out, id, i == 0);
      if (i) operand_types += ", ";
      operand_types += type_of(id).str();
    }
    out += ")";
    if (!op.regions.empty()) {
      out += " (";
      for (size_t r = 0; r < op.regions.size(); ++r) {
        const Block& body = blocks_[op.regions[r]];
        out += r ? ", {\n" : "{\n";
        out += pad + "  ^bb0(";
        for (size_t i = 0; i < body.args.size(); ++i) {
          append_id(out, body.args[i], i == 0);
          out += ": " + type_of(body.args[i]).str();
        }
        out += "):\n";
        print_block(out, body, indent + 4);
        out += pad + "}";
      }
      out += ")";
    }
    if (!op.attributes.empty()) out += " " + op.attributes;
    out += " : (" + operand_types + ") -> ";
    std::string result_types;
    for (int i = 0; i < op.num_results; ++i) {
      if (i) result_types += ", ";
      result_types += type_of(op.first_result + i).str();
    }
    out += op.num_results == 1 ? result_types : "(" + result_types + ")";
    if (op.bf16_split >= 0) {
      std::string group = std::to_string(op.bf16_split);
      out += " loc(\"";
      out += kBf16SplitLoc;
      out += group + "\")";
      out += kBf16SplitMarker;
      out += group;
    }
    out += "\n";
  }
}

std::string with_donated_params(const std::string& module, const std::vector<size_t>& params) {
  static constexpr std::string_view kMain = "func.func public @main(";
  static constexpr std::string_view kDonor = " {jax.buffer_donor = true}";
  size_t start = module.find(kMain);
  if (start == std::string::npos) throw TypeError("with_donated_params: no public @main");
  start += kMain.size();
  size_t end = module.find(") -> (", start);
  if (end == std::string::npos) throw TypeError("with_donated_params: @main has no results");
  // Parameters are printed "%id: type[ attrs]", separated by ", %"; types
  // hold neither.
  std::vector<size_t> ends;  // where each parameter's text ends
  for (size_t at = start; at < end;) {
    size_t next = module.find(", %", at);
    if (next == std::string::npos || next > end) next = end;
    ends.push_back(next);
    at = next + 2;
  }
  std::vector<bool> donate(ends.size(), false);
  for (size_t i : params) {
    if (i >= ends.size()) throw TypeError("with_donated_params: no parameter " + std::to_string(i));
    donate[i] = true;
  }
  std::string out;
  out.reserve(module.size() + params.size() * kDonor.size());
  size_t copied = 0;
  for (size_t i = 0; i < ends.size(); ++i) {
    // One attribute dictionary per parameter: one that has one (a donor, or
    // aliased to its result) is donated already.
    if (!donate[i] || module[ends[i] - 1] == '}') continue;
    out.append(module, copied, ends[i] - copied);
    out += kDonor;
    copied = ends[i];
  }
  out.append(module, copied, std::string::npos);
  return out;
}

std::string Builder::module() const {
  std::string out = "module @torch_tpu {\n  func.func public @main(";
  // A parameter taken in another shape is %p<id>, reshaped into %<id> first.
  std::string entry;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (i) out += ", ";
    std::string id = std::to_string(params_[i].id());
    if (const TensorType* as = taken_as_[i]) {
      out += "%p" + id + ": " + as->str();
      entry += "    %" + id + " = \"stablehlo.reshape\"(%p" + id + ") : (" + as->str() + ") -> " +
               params_[i].type().str() + "\n";
    } else {
      out += "%" + id + ": " + params_[i].type().str();
    }
    if (aliased_[i] >= 0)
      out += " {tf.aliasing_output = " + std::to_string(aliased_[i]) + " : i32}";
    else if (donated_[i])
      out += " {jax.buffer_donor = true}";
  }
  out += ") -> (";
  std::vector<TensorType> result_types;
  for (const Value& v : results_) result_types.push_back(v.type());
  out += type_list(result_types) + ") {\n";
  out += entry;
  print_block(out, blocks_[0], 4);
  out += "    \"func.return\"(";
  for (size_t i = 0; i < results_.size(); ++i) {
    out += i ? ", %" : "%";
    out += std::to_string(results_[i].id());
  }
  out += ") : (" + type_list(result_types) + ") -> ()\n  }\n";
  for (const KernelPtr& k : kernels_) out += k->functions + "\n";
  out += "}\n";
  return out;
}

Fingerprint Builder::fingerprint() const {
  // The running digest covers every op, region and parameter in the order
  // they were added (which determines the printed text); add what module()
  // prints beyond them.
  Fingerprint f = running_;
  Digest d{f};
  d.add(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    d.add(static_cast<uint64_t>(donated_[i]));
    if (taken_as_[i]) d.add(taken_as_[i]);
    if (aliased_[i] >= 0) d.add(static_cast<uint64_t>(aliased_[i]) << 8 | 0x41);
  }
  d.add(results_.size());
  for (const Value& v : results_) d.add(v.id());
  return f;
}

}  // namespace torch_tpu::hlo
