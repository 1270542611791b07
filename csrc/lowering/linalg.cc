// The matmul family (mm, bmm, addmm, baddbmm, addbmm, addmv, mv, dot, ...)
// through one TPU-numerics dot (precision.h), and the factorizations and
// triangular solves XLA provides natively (linalg_decomp.cc).
// matmul, linear, einsum, tensordot, inner, outer are CompositeImplicit:
// PyTorch reduces them to these ops above the backend.
#include "helpers.h"
#include "precision.h"

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;

// Operand `i` converted to the compute type of the result.
Value operand(Context& c, const Args& a, size_t i) {
  return c.b.convert(a[i].tensor, c.out().dtype);
}

// A contraction of operands 0 and 1 with `dims`.
LoweringFn dot_rule(DotDims dims) {
  return [dims](Context& c, const Args& a) {
    return Values{precise_dot(c, operand(c, a, 0), operand(c, a, 1), dims)};
  };
}

// beta * self + alpha * product, computed in product's type (f32 for 16-bit
// results, rounded once) and converted to the result type. Like PyTorch,
// beta == 0 ignores self, so NaN or inf there does not propagate.
Value affine(Context& c, const Args& a, Value product, size_t self, size_t beta, size_t alpha) {
  const TensorType& out = c.out();
  ElementType t = product.dtype();
  Value p = c.b.broadcast_to(product, out.shape);
  if (alpha < a.size() && a[alpha].kind == Arg::kTensor)
    p = c.b.mul(coerce(c.b, a[alpha].tensor, t, out.shape), p);
  Value s = coerce(c.b, a[self].tensor, t, out.shape);
  if (beta < a.size() && a[beta].kind == Arg::kTensor) {
    Value bt = coerce(c.b, a[beta].tensor, t, out.shape);
    Value zero = splat(c.b, 0, t, out.shape);
    s = c.b.select(c.b.compare(Compare::kEQ, bt, zero), zero, c.b.mul(bt, s));
  }
  return c.b.convert(c.b.add(s, p), out.dtype);
}

// self + alpha·(x·y), with the operands of the product at indices 1 and 2.
LoweringFn addmm_rule(DotDims dims) {
  return [dims](Context& c, const Args& a) {
    if (c.out().dtype == ElementType::kPred) throw Unsupported("bool operands");
    Value p = precise_dot(c, operand(c, a, 1), operand(c, a, 2), dims, /*keep_f32=*/true);
    return Values{affine(c, a, p, 0, 3, 4)};
  };
}

// Functions, not globals: registration may run during static initialization.
DotDims batched();
DotDims batch_sum();

// addbmm on 16-bit results: CPU adds the batches into self one at a time
// (addmm_ per batch), rounding after each: r(beta·self + alpha·P₀), then
// r(acc + alpha·Pᵢ). The products Pᵢ accumulate in f32 (precise_dot).
Values addbmm_half(Context& c, const Args& a) {
  Value p = precise_dot(c, operand(c, a, 1), operand(c, a, 2), batched(), /*keep_f32=*/true);
  int64_t nb = p.dim(0), n = p.dim(1), m = p.dim(2);
  if (nb == 0) return {affine(c, a, splat(c.b, 0, p.dtype(), {n, m}), 0, 3, 4)};
  auto batch = [](Builder& b, Value p, Value i) {
    Value z = b.constant(ElementType::kI32, 0);
    return b.reshape(b.dynamic_slice(p, {i, z, z}, {1, p.dim(1), p.dim(2)}), {p.dim(1), p.dim(2)});
  };
  Value first = affine(c, a, batch(c.b, p, c.b.constant(ElementType::kI32, 0)), 0, 3, 4);
  Value alpha = a.size() > 4 && a[4].kind == Arg::kTensor ? c.b.convert(a[4].tensor, p.dtype())
                                                          : c.b.constant(p.dtype(), 1);
  Values out = c.b.while_loop(
      {c.b.constant(ElementType::kI32, 1), first, p, alpha},
      [nb](Builder& w, const Values& st) {
        return Values{w.compare(Compare::kLT, st[0], w.constant(ElementType::kI32, nb))};
      },
      [batch](Builder& w, const Values& st) {
        Value term = w.mul(w.broadcast_to(st[3], {st[2].dim(1), st[2].dim(2)}), batch(w, st[2], st[0]));
        Value acc = w.convert(w.add(w.convert(st[1], st[2].dtype()), term), st[1].dtype());
        return Values{w.add(st[0], w.constant(ElementType::kI32, 1)), acc, st[2], st[3]};
      });
  return {out[1]};
}

DotDims matrix() { return {{}, {}, {1}, {0}}; }          // [n,k]·[k,m]
DotDims batched() { return {{0}, {0}, {2}, {1}}; }       // [b,n,k]·[b,k,m]
DotDims batch_sum() { return {{}, {}, {0, 2}, {0, 1}}; }  // Σ_b [b,n,k]·[b,k,m]
DotDims vector() { return {{}, {}, {0}, {0}}; }          // [k]·[k]

// vdot(x, y) = Σ conj(x) y; dot of real vectors otherwise.
Values vdot(Context& c, const Args& a) {
  return {precise_dot(c, conj(c.b, operand(c, a, 0)), operand(c, a, 1), vector())};
}

// addr on bools, as CPU: (beta and self) or (alpha and v1[i] and v2[j]).
Value addr_bool(Context& c, const Args& a) {
  const TensorType& out = c.out();
  auto with = [&](size_t scale, Value v) {
    if (scale >= a.size() || a[scale].kind != Arg::kTensor) return v;
    return c.b.and_(coerce(c.b, a[scale].tensor, out), v);
  };
  Value x = c.b.broadcast_in_dim(c.b.convert(a[1].tensor, out.dtype), out.shape, {0});
  Value y = c.b.broadcast_in_dim(c.b.convert(a[2].tensor, out.dtype), out.shape, {1});
  return c.b.or_(with(3, coerce(c.b, a[0].tensor, out)), with(4, c.b.and_(x, y)));
}

// addr: beta·self + (alpha·v1)·v2, an exact elementwise product, not a
// contraction. CPU computes it in the result dtype, 16-bit too: each product
// and the sum round to it (round_like; beta and alpha are read in it).
Values addr(Context& c, const Args& a) {
  const TensorType& out = c.out();
  if (out.dtype == ElementType::kPred) return {addr_bool(c, a)};
  ElementType h = out.dtype, t = accumulation_type(h);
  auto r = [&](Value v) { return round_like(c.b, v, h); };
  auto scalar = [&](size_t i) { return r(coerce(c.b, a[i].tensor, t, out.shape)); };
  Value x = c.b.broadcast_in_dim(c.b.convert(a[1].tensor, t), out.shape, {0});
  Value y = c.b.broadcast_in_dim(c.b.convert(a[2].tensor, t), out.shape, {1});
  if (a.size() > 4 && a[4].kind == Arg::kTensor) x = r(c.b.mul(scalar(4), x));
  Value p = r(c.b.mul(x, y)), s = coerce(c.b, a[0].tensor, t, out.shape);
  if (a.size() > 3 && a[3].kind == Arg::kTensor) {  // beta == 0 ignores self (NaN too)
    Value beta = scalar(3), zero = splat(c.b, 0, t, out.shape);
    s = c.b.select(c.b.compare(Compare::kEQ, beta, zero), zero, r(c.b.mul(beta, s)));
  }
  return {c.b.convert(c.b.add(s, p), h)};
}

// x converted to f32 when 16-bit, f applied, converted back (as CPU does).
Value widened(Builder& b, Value x, Value (*f)(Builder&, Value)) {
  ElementType t = x.dtype();
  return b.convert(f(b, b.convert(x, accumulation_type(t))), t);
}

Value relu(Builder& b, Value x) {
  return b.select(b.compare(Compare::kLT, x, splat_like(b, 0, x)), splat_like(b, 0, x), x);
}

// gelu(x) = x/2 · (1 + erf(x/√2)), the exact form CPU uses here.
Value gelu(Builder& b, Value x) {
  Value erf = b.unary("chlo.erf", b.mul(x, splat_like(b, 0.7071067811865476, x)));
  return b.mul(b.mul(splat_like(b, 0.5, x), x), b.add(splat_like(b, 1, x), erf));
}

// addmm followed by relu, or by gelu when use_gelu.
Values addmm_activation(Context& c, const Args& a) {
  Value y = addmm_rule(matrix())(c, a)[0];
  bool use_gelu = a.size() > 5 && a[5].b;
  return {widened(c.b, y, use_gelu ? gelu : relu)};
}

// The out_dtype overloads (mm.dtype, ...): 16-bit operands, f32 result.
LoweringFn out_dtype_rule(DotDims dims) {
  return [dims](Context& c, const Args& a) {
    Value p = precise_dot(c, a[0].tensor, a[1].tensor, dims, /*keep_f32=*/true);
    return Values{c.b.convert(p, c.out().dtype)};
  };
}

// int8 · int8 accumulated in int32.
Values int_mm(Context& c, const Args& a) {
  return {c.b.dot_general(a[0].tensor, a[1].tensor, {}, {}, {1}, {0}, ElementType::kI32)};
}

}  // namespace

void register_linalg_decompositions(Registry& r);
void register_linalg_factorizations(Registry& r);  // linalg_factor.cc
void register_linear(Registry& r);                 // linear.cc

void register_linalg(Registry& r) {
  r.add("aten::mm", dot_rule(matrix()));
  r.add("aten::bmm", dot_rule(batched()));
  r.add("aten::mv", dot_rule(matrix()));
  r.add("aten::dot", dot_rule(vector()));
  r.add("aten::vdot", vdot);
  r.add("aten::addmm", addmm_rule(matrix()));
  r.add("aten::baddbmm", addmm_rule(batched()));
  r.add("aten::addbmm", [](Context& c, const Args& a) {
    if (is_half(c.out().dtype)) return addbmm_half(c, a);
    return addmm_rule(batch_sum())(c, a);
  });
  r.add("aten::addmv", addmm_rule(matrix()));
  r.add("aten::addr", addr);
  r.add("aten::_addmm_activation", addmm_activation);
  r.add("aten::mm.dtype", out_dtype_rule(matrix()));
  r.add("aten::bmm.dtype", out_dtype_rule(batched()));
  r.add("aten::_int_mm", int_mm);
  // affine(), addr() and addbmm_half() read a missing beta or alpha as 1: a
  // linear layer's addmm then adds its bias with no scale, compare or select.
  for (const char* op : {"aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::addmv", "aten::addr",
                         "aten::_addmm_activation"})
    r.omit_unit_scales(op);
  register_linalg_decompositions(r);
  register_linalg_factorizations(r);
  register_linear(r);
}

}  // namespace torch_tpu::lowering
