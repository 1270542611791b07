#include "programs.h"

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <numeric>
#include <sstream>

#include "../hlo/builder.h"

namespace torch_tpu::distributed {

namespace {

using hlo::Builder;
using hlo::ElementType;
using hlo::Value;
using hlo::Values;
using Op = c10d::ReduceOp::RedOpType;

const char* kNames[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all",
                        "reduce", "gather", "scatter", "send/recv"};

int64_t total(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

// The binary op of a reduction, or null when `dtype` has none for it.
using Combine = Value (Builder::*)(Value, Value);
Combine combiner(int64_t reduce, ElementType dtype) {
  bool pred = dtype == ElementType::kPred, integral = hlo::is_integer(dtype) || pred;
  switch (static_cast<Op>(reduce)) {
    case Op::SUM:
    case Op::AVG:
      if (pred) return reduce == Op::SUM ? &Builder::or_ : nullptr;
      return &Builder::add;
    case Op::PRODUCT: return pred ? &Builder::and_ : &Builder::mul;
    case Op::MIN: return pred ? &Builder::and_ : &Builder::min;
    case Op::MAX: return pred ? &Builder::or_ : &Builder::max;
    case Op::BAND: return integral ? &Builder::and_ : nullptr;
    case Op::BOR: return integral ? &Builder::or_ : nullptr;
    case Op::BXOR: return integral ? &Builder::xor_ : nullptr;
    default: return nullptr;
  }
}

// and/or/xor of integers (bool's and/or are all-reduced directly).
bool bitwise(int64_t reduce, ElementType dtype) {
  return hlo::is_integer(dtype) && (reduce == Op::BAND || reduce == Op::BOR || reduce == Op::BXOR);
}

hlo::RegionFn region(Combine f) {
  return [f](Builder& b, const Values& args) { return Values{(b.*f)(args[0], args[1])}; };
}

// The unsigned integer type of `dtype`'s width (broadcast moves bits).
ElementType bits_type(ElementType dtype) {
  switch (hlo::bit_width(dtype)) {
    case 8: return ElementType::kU8;
    case 16: return ElementType::kU16;
    case 32: return ElementType::kU32;
    default: return ElementType::kU64;
  }
}

}  // namespace

std::string CollectiveSpec::str() const {
  std::ostringstream s;
  s << kNames[static_cast<int>(op)] << " of " << hlo::mlir_name(dtype) << ", inputs [";
  for (size_t i = 0; i < in_numels.size(); ++i) s << (i ? ", " : "") << in_numels[i];
  s << "] elements, outputs [";
  for (size_t i = 0; i < out_numels.size(); ++i) s << (i ? ", " : "") << out_numels[i];
  s << "]";
  if (reduce >= 0) s << ", reduce op " << reduce;
  if (root >= 0) s << ", root " << root;
  return s.str();
}

std::string unsupported(const CollectiveSpec& spec) {
  if (hlo::is_complex(spec.dtype)) return "complex tensors";
  if (spec.op == Collective::kAllReduce || spec.op == Collective::kReduceScatter ||
      spec.op == Collective::kReduce) {
    if (!combiner(spec.reduce, spec.dtype)) return "this reduce op for this dtype";
    if (spec.reduce == Op::AVG && !hlo::is_float(spec.dtype)) return "AVG of integers";
  }
  if (spec.in_numels.empty() || spec.out_numels.empty()) return "no tensors";
  if (total(spec.in_numels) == 0) return "empty tensors";
  return {};
}

std::string bad_sizes(const CollectiveSpec& spec) {
  int64_t in = total(spec.in_numels), out = total(spec.out_numels), n = spec.size;
  int64_t expected = in;
  if (spec.op == Collective::kAllGather || spec.op == Collective::kGather) expected = in * n;
  if (spec.op == Collective::kReduceScatter || spec.op == Collective::kScatter) {
    if (in % n != 0) return "the input's " + std::to_string(in) + " elements do not split into " + std::to_string(n) + " ranks";
    expected = in / n;
  }
  if ((spec.op == Collective::kGather || spec.op == Collective::kScatter) &&
      (spec.root < 0 || spec.root >= n))
    return "root " + std::to_string(spec.root) + " is not a rank of the group";
  if (spec.op == Collective::kAllToAll && in % n != 0)
    return "the input's " + std::to_string(in) + " elements do not split into " +
           std::to_string(n) + " equal parts";
  if (out != expected)
    return "the outputs hold " + std::to_string(out) + " elements, the collective makes " +
           std::to_string(expected);
  return {};
}

std::string collective_program(const CollectiveSpec& spec) {
  Builder b;
  Values params;
  for (int64_t n : spec.in_numels) params.push_back(b.parameter(hlo::TensorType{spec.dtype, {n}}));
  Value x = b.concatenate(params, 0);
  std::vector<int64_t> everyone(spec.size);
  std::iota(everyone.begin(), everyone.end(), 0);
  const Builder::ReplicaGroups groups{everyone};
  Value y;
  switch (spec.op) {
    case Collective::kAllReduce:
    case Collective::kReduce:
    case Collective::kReduceScatter: {
      Combine f = combiner(spec.reduce, spec.dtype);
      if (bitwise(spec.reduce, spec.dtype)) {
        // XLA:CPU reduces no integer and/or/xor across devices: gather every
        // rank's values and reduce them here (n times the traffic).
        int64_t len = x.dim(0);
        Value all = b.reshape(b.all_gather(x, 0, groups), {spec.size, len});
        Value init = b.constant_bits(spec.dtype, spec.reduce == Op::BAND ? ~uint64_t{0} : 0);
        y = b.reduce({all}, {init}, {0}, region(f))[0];
        if (spec.op == Collective::kReduceScatter)
          y = b.dynamic_slice(y, {b.mul(b.convert(b.replica_id(), ElementType::kI64),
                                        b.constant_int(ElementType::kI64, len / spec.size))},
                              {len / spec.size});
        break;
      }
      y = spec.op == Collective::kReduceScatter ? b.reduce_scatter(x, 0, groups, region(f))
                                                : b.all_reduce(x, groups, region(f));
      if (spec.reduce == Op::AVG)
        y = b.div(y, b.broadcast_to(b.constant(spec.dtype, static_cast<double>(spec.size)),
                                    y.type().shape));
      break;
    }
    case Collective::kBroadcast: {
      // XLA:CPU cannot compile collective_broadcast: every rank but the root
      // contributes zero bits and the ranks add them as unsigned integers
      // (OR for bool), which moves the root's bits exactly (-0.0 and NaN
      // payloads included).
      ElementType bits = spec.dtype == ElementType::kPred ? spec.dtype : bits_type(spec.dtype);
      hlo::TensorType t{bits, x.type().shape};
      Value v = bits == spec.dtype ? x : b.bitcast_convert(x, t);
      Value is_root = b.compare(hlo::Compare::kEQ, b.replica_id(),
                                b.constant_int(ElementType::kU32, spec.root));
      v = b.select(is_root, v, b.zeros(t));
      v = b.all_reduce(v, groups, region(bits == ElementType::kPred ? &Builder::or_ : &Builder::add));
      y = bits == spec.dtype ? v : b.bitcast_convert(v, x.type());
      break;
    }
    case Collective::kAllGather:
    case Collective::kGather: y = b.all_gather(x, 0, groups); break;
    case Collective::kAllToAll: y = b.all_to_all(x, 0, 0, groups); break;
    case Collective::kScatter: {
      // Rank r receives chunk r of every rank's input; it keeps the root's.
      int64_t chunk = x.dim(0) / spec.size;
      y = b.slice(b.all_to_all(x, 0, 0, groups), {spec.root * chunk},
                  {(spec.root + 1) * chunk}, {1});
      break;
    }
    case Collective::kPermute:
      // Replica 0 sends to replica 1 (what replica 0 gets back is unused);
      // one replica: both ends share a device, the program copies.
      y = spec.size == 1 ? x : b.collective_permute(x, {{0, 1}});
      break;
  }
  Values results;
  int64_t start = 0;
  for (int64_t n : spec.out_numels) {
    results.push_back(b.slice(y, {start}, {start + n}, {1}));
    start += n;
  }
  b.set_results(results);
  return b.module();
}

}  // namespace torch_tpu::distributed
