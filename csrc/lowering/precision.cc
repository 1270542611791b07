#include "precision.h"

#include <algorithm>

namespace torch_tpu::lowering {

Values bf16_terms(Builder& b, Value x, int n) {
  Values terms;
  Value rest = x;
  for (int i = 0; i < n; ++i) {
    Value term = b.reduce_precision(rest, 8, 7);  // round to bf16, stay f32
    terms.push_back(term);
    if (i + 1 < n) rest = b.sub(rest, term);      // exact in f32
  }
  return terms;
}

namespace {

int term_count(Precision p) {
  switch (p) {
    case Precision::kDefault: return 1;
    case Precision::kHigh: return 2;
    default: return 3;
  }
}

}  // namespace

Value precise(Builder& b, Precision p, Value lhs, Value rhs, const Contraction& f) {
  if (lhs.dtype() != ElementType::kF32 || p == Precision::kFloat32) return f(lhs, rhs);
  int n = term_count(p);
  Values x = bf16_terms(b, lhs, n), y = bf16_terms(b, rhs, n);
  Value top = f(x[0], y[0]);
  if (n == 1) return top;
  Value sum = b.add(f(x[0], y[1]), f(x[1], y[0]));
  if (n == 3) {
    Value small = b.add(b.add(f(x[0], y[2]), f(x[2], y[0])), f(x[1], y[1]));
    sum = b.add(small, sum);
  }
  // Where hi·hi is inf or NaN an operand was: the correction terms would turn
  // an inf into NaN (inf · 0), so the leading product is the answer.
  return b.select(b.is_finite(top), b.add(sum, top), top);
}

const char* dot_precision_name(Precision p, ElementType dtype) {
  switch (dtype) {
    case ElementType::kBF16: return "DEFAULT";
    case ElementType::kF32: return p == Precision::kFloat32 ? "HIGHEST" : "DEFAULT";
    case ElementType::kF16:
    case ElementType::kF64:
    case ElementType::kC64:
    case ElementType::kC128: return "HIGHEST";
    default: return "";
  }
}

namespace {

// Whether `dims` are exactly from, from + 1, ... in order.
bool consecutive(const std::vector<int64_t>& dims, int64_t from) {
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != from + static_cast<int64_t>(i)) return false;
  return true;
}

// The dims of a rank-`rank` operand that are neither batch nor contracting.
std::vector<int64_t> free_dims(int64_t rank, const std::vector<int64_t>& batch,
                               const std::vector<int64_t>& contract) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < rank; ++i)
    if (std::find(batch.begin(), batch.end(), i) == batch.end() &&
        std::find(contract.begin(), contract.end(), i) == contract.end())
      out.push_back(i);
  return out;
}

// The operand forms a row-major gemm reads without copying: batch dims
// first, then the lhs as [free, contracting], the rhs as [contracting, free]
// or [free, contracting].
bool gemm_form(int64_t rank, const std::vector<int64_t>& batch,
               const std::vector<int64_t>& contract, bool lhs) {
  int64_t nb = batch.size(), nc = contract.size();
  if (!consecutive(batch, 0)) return false;
  if (consecutive(contract, rank - nc)) return true;
  return !lhs && consecutive(contract, nb);
}

// An operand read through a transpose (a weight's .t(), k.transpose(-2, -1))
// is contracted as its source is laid out, the transpose going into the
// dimension numbers, when that gives a gemm form, so the transpose is never
// materialized. The free dims must keep their order (they order the result).
void fold_transpose(Builder& b, Value& v, std::vector<int64_t>& batch,
                    std::vector<int64_t>& contract, bool lhs) {
  Value source;
  std::vector<int64_t> perm;
  if (!b.transposed(v, &source, &perm)) return;
  std::vector<int64_t> nb, nc, nf;
  for (int64_t d : batch) nb.push_back(perm[d]);
  for (int64_t d : contract) nc.push_back(perm[d]);
  for (int64_t d : free_dims(v.rank(), batch, contract)) nf.push_back(perm[d]);
  if (!std::is_sorted(nf.begin(), nf.end()) || !gemm_form(source.rank(), nb, nc, lhs)) return;
  v = source, batch = nb, contract = nc;
}

}  // namespace

Value precise_dot(Context& c, Value lhs, Value rhs, const DotDims& dims, bool keep_f32) {
  DotDims d = dims;
  fold_transpose(c.b, lhs, d.lhs_batch, d.lhs_contract, true);
  fold_transpose(c.b, rhs, d.rhs_batch, d.rhs_contract, false);
  ElementType t = lhs.dtype();
  bool half = t == ElementType::kBF16 || t == ElementType::kF16;
  ElementType acc = half ? ElementType::kF32 : t;
  const char* name = dot_precision_name(c.precision, t);
  // The split terms of f32 operands are bf16-exact: the dot takes them as
  // bf16 (converting is exact) with an f32 result, so XLA:CPU runs it on its
  // bf16 gemm with the same products. Its generic dot kernel rejects bf16 x
  // bf16 -> f32 ("Unsupported element type for DotThunk"), and which dots go
  // there depends on the whole optimized program, so the converts and the dot
  // are marked: engine::compile_checked checks the optimized program and
  // recompiles with those types read as f32 where a dot would not run.
  bool split = t == ElementType::kF32 && c.precision != Precision::kFloat32 && c.target.bf16_split_dots;
  // A bf16 dot (bf16 operands, f32 result) meets the same kernel: its
  // operands go through marked no-op converts, which the fallback turns into
  // converts to f32 (exact), so it too can be put back in f32.
  bool bf16 = t == ElementType::kBF16 && c.target.checked_bf16_dots;
  Value r = precise(c.b, c.precision, lhs, rhs, [&](Value l, Value r) {
    if (!split && !bf16)
      return c.b.dot_general(l, r, d.lhs_batch, d.rhs_batch, d.lhs_contract, d.rhs_contract, acc,
                             name);
    l = c.b.convert_as_written(l, ElementType::kBF16);
    r = c.b.convert_as_written(r, ElementType::kBF16);
    Value out = c.b.dot_general(l, r, d.lhs_batch, d.rhs_batch, d.lhs_contract, d.rhs_contract,
                                acc, name);
    for (Value v : {l, r, out}) c.b.mark_bf16_split(v, out.id());
    return out;
  });
  return half && !keep_f32 ? c.b.convert(r, t) : r;
}

}  // namespace torch_tpu::lowering
