#include "tensor_io.h"

#include <ATen/ops/empty.h>
#include <c10/core/TensorImpl.h>

#include <cstring>

#include "../lowering/strided.h"
#include "device.h"
#include "step_capture.h"
#include "storage.h"

namespace torch_tpu::aten {

using hlo::ElementType;
using lowering::Strided;

hlo::ElementType to_hlo(c10::ScalarType t) {
  switch (t) {
    case c10::kBool: return ElementType::kPred;
    case c10::kByte: return ElementType::kU8;
    case c10::kChar: return ElementType::kI8;
    case c10::kShort: return ElementType::kI16;
    case c10::kInt: return ElementType::kI32;
    case c10::kLong: return ElementType::kI64;
    case c10::kHalf: return ElementType::kF16;
    case c10::kBFloat16: return ElementType::kBF16;
    case c10::kFloat: return ElementType::kF32;
    case c10::kDouble: return ElementType::kF64;
    case c10::kComplexFloat: return ElementType::kC64;
    case c10::kComplexDouble: return ElementType::kC128;
    case c10::kUInt16: return ElementType::kU16;
    case c10::kUInt32: return ElementType::kU32;
    case c10::kUInt64: return ElementType::kU64;
    default:
      TORCH_CHECK_TYPE(false, "tpu tensors do not support dtype ", t);
  }
}

c10::ScalarType to_torch(hlo::ElementType t) {
  switch (t) {
    case ElementType::kPred: return c10::kBool;
    case ElementType::kU8: return c10::kByte;
    case ElementType::kI8: return c10::kChar;
    case ElementType::kI16: return c10::kShort;
    case ElementType::kI32: return c10::kInt;
    case ElementType::kI64: return c10::kLong;
    case ElementType::kF16: return c10::kHalf;
    case ElementType::kBF16: return c10::kBFloat16;
    case ElementType::kF32: return c10::kFloat;
    case ElementType::kF64: return c10::kDouble;
    case ElementType::kC64: return c10::kComplexFloat;
    case ElementType::kC128: return c10::kComplexDouble;
    case ElementType::kU16: return c10::kUInt16;
    case ElementType::kU32: return c10::kUInt32;
    case ElementType::kU64: return c10::kUInt64;
  }
  return c10::kFloat;
}

namespace {

Strided view_of(const at::Tensor& t) {
  Strided s;
  s.sizes = t.sizes().vec();
  s.strides = t.strides().vec();
  s.offset = t.storage_offset();
  return s;
}

// `flat` (rank 1) reinterpreted as elements of `to`: the bytes are the same
// (a storage viewed as another dtype, or copied as raw bytes).
hlo::Value reinterpret(hlo::Builder& b, hlo::Value flat, ElementType to) {
  ElementType from = flat.dtype();
  if (from == to) return flat;
  // i1 has no bit layout of its own in StableHLO: its byte is 0 or 1.
  if (from == ElementType::kPred) return reinterpret(b, b.convert(flat, ElementType::kU8), to);
  if (to == ElementType::kPred) {
    hlo::Value bytes = reinterpret(b, flat, ElementType::kU8);
    return b.compare(hlo::Compare::kNE, bytes, b.full(bytes.type(), 0));
  }
  // Complex numbers are (real, imaginary) pairs of their part type.
  if (hlo::is_complex(from)) {
    ElementType part = from == ElementType::kC64 ? ElementType::kF32 : ElementType::kF64;
    hlo::TensorType t{part, {flat.dim(0), 1}};
    hlo::Value re = b.reshape(b.op("stablehlo.real", {flat}, {{part, flat.shape()}})[0], t.shape);
    hlo::Value im = b.reshape(b.op("stablehlo.imag", {flat}, {{part, flat.shape()}})[0], t.shape);
    return reinterpret(b, b.reshape(b.concatenate({re, im}, 1), {2 * flat.dim(0)}), to);
  }
  if (hlo::is_complex(to)) {
    ElementType part = to == ElementType::kC64 ? ElementType::kF32 : ElementType::kF64;
    hlo::Value parts = reinterpret(b, flat, part);
    int64_t n = parts.dim(0) / 2;
    hlo::Value pairs = b.reshape(b.slice(parts, {0}, {2 * n}), {n, 2});
    hlo::Value re = b.reshape(b.slice(pairs, {0, 0}, {n, 1}), {n});
    hlo::Value im = b.reshape(b.slice(pairs, {0, 1}, {n, 2}), {n});
    return b.op("stablehlo.complex", {re, im}, {{to, {n}}})[0];
  }
  int64_t wf = hlo::bit_width(from), wt = hlo::bit_width(to), n = flat.dim(0);
  if (wf == wt) return b.bitcast_convert(flat, hlo::TensorType{to, {n}});
  if (wf > wt) {  // each element splits into wf/wt smaller ones
    int64_t r = wf / wt;
    return b.reshape(b.bitcast_convert(flat, hlo::TensorType{to, {n, r}}), {n * r});
  }
  int64_t r = wt / wf;
  TORCH_CHECK(n % r == 0, "tpu: a storage of ", n, " ", hlo::mlir_name(from),
              " elements cannot be viewed as ", hlo::mlir_name(to));
  return b.bitcast_convert(b.reshape(flat, {n / r, r}), hlo::TensorType{to, {n / r}});
}

// The storage's flat value in the tensor's element type, initializing an
// unwritten storage to zeros (PyTorch leaves `empty` undefined; zeros are a
// deterministic choice).
hlo::Value flat_value(engine::Engine& e, StorageState& st, ElementType dtype) {
  auto& b = e.builder();
  if (!st.value) {
    int64_t n = static_cast<int64_t>(st.nbytes / engine::element_size(dtype));
    st.value = e.produce(b.full(hlo::TensorType{dtype, {n}}, 0));
    st.dtype = dtype;
  }
  return reinterpret(b, e.use(st.value), dtype);
}

// Points the storage at its new value; the old one is what a failure of the
// new value's program leaves the storage with.
void replace(engine::Engine& e, StorageState& st, engine::ValuePtr next) {
  e.supersede(next, st.value);
  st.value = std::move(next);
}

// Whether `t` covers its whole storage densely in row-major order: the
// common case, read and written by a reshape alone.
bool whole_and_contiguous(const at::Tensor& t, const StorageState& st) {
  return t.storage_offset() == 0 && t.is_contiguous() &&
         static_cast<size_t>(t.numel()) * t.element_size() == st.nbytes;
}

}  // namespace

hlo::Value read(engine::Engine& e, const at::Tensor& t) {
  note_storage(t.storage());
  StorageState& st = state_of(t);
  ElementType dtype = to_hlo(t.scalar_type());
  hlo::Value flat = flat_value(e, st, dtype);
  if (whole_and_contiguous(t, st))
    return e.builder().reshape(flat, t.sizes().data(), t.sizes().size());
  return lowering::strided_read(e.builder(), flat, view_of(t));
}

void write(engine::Engine& e, const at::Tensor& t, hlo::Value v) {
  auto& b = e.builder();
  note_storage(t.storage());
  StorageState& st = state_of(t);
  ElementType dtype = to_hlo(t.scalar_type());
  TORCH_CHECK(c10::IntArrayRef(v.shape()) == t.sizes(), "internal: writing ", v.type().str(),
              " into a tpu tensor of shape ", t.sizes());
  v = b.convert(v, dtype);
  if (whole_and_contiguous(t, st)) {  // the whole storage is replaced
    const int64_t n = t.numel();
    replace(e, st, e.produce(b.reshape(v, &n, 1)));
    st.dtype = dtype;
    return;
  }
  Strided view = view_of(t);
  int64_t n = static_cast<int64_t>(st.nbytes / engine::element_size(dtype));
  hlo::Value dense = lowering::dense_layout(b, v, view, n);
  hlo::Value flat;
  if (dense.valid() && st.nbytes % engine::element_size(dtype) == 0) {
    flat = dense;  // the whole storage is replaced: nothing to read
    st.dtype = dtype;
  } else {
    flat = reinterpret(b, lowering::strided_write(b, flat_value(e, st, dtype), v, view), st.dtype);
  }
  replace(e, st, e.produce(flat));
}

hlo::ElementType scalar_dtype(const c10::Scalar& s, bool wide) {
  if (s.isBoolean()) return ElementType::kPred;
  if (s.isIntegral(false)) return ElementType::kI64;
  if (s.isComplex()) return wide ? ElementType::kC128 : ElementType::kC64;
  return wide ? ElementType::kF64 : ElementType::kF32;
}

engine::ScalarBits scalar_bits(const c10::Scalar& s, hlo::ElementType dtype) {
  engine::ScalarBits bits;
  switch (dtype) {
    case ElementType::kPred: bits.words[0] = s.toBool() ? 1 : 0; break;
    case ElementType::kF32: {
      float f = s.toFloat();
      std::memcpy(bits.words, &f, 4);
      break;
    }
    case ElementType::kF64: {
      double d = s.toDouble();
      std::memcpy(bits.words, &d, 8);
      break;
    }
    case ElementType::kI64: bits.words[0] = static_cast<uint64_t>(s.toLong()); break;
    default: {
      // Other types (complex ones whole: real, then imaginary part) go
      // through a typed host tensor so rounding matches CPU.
      at::Tensor h = at::empty({}, at::TensorOptions().dtype(to_torch(dtype)));
      h.fill_(s);
      static_assert(sizeof(bits.words) == sizeof(c10::complex<double>));
      std::memcpy(bits.words, h.data_ptr(), h.element_size());
      break;
    }
  }
  return bits;
}

hlo::Value host_scalar(engine::Engine& e, const c10::Scalar& s, hlo::ElementType dtype) {
  return e.scalar(dtype, scalar_bits(s, dtype));
}

// ---- deferred lowering ------------------------------------------------------

namespace {

// The zeros an unwritten storage reads as (see flat_value), deferred.
class DeferredZeros final : public engine::DeferredOp {
 public:
  DeferredZeros(uint32_t index, hlo::TensorType type) : index_(index), type_(std::move(type)) {}
  void lower(engine::Engine& e) override { e.set_trace_result(index_, e.builder().full(type_, 0)); }

 private:
  uint32_t index_;
  hlo::TensorType type_;
};

}  // namespace

bool capture_read(engine::Engine& e, const at::Tensor& t, CapturedRead* r) {
  note_storage(t.storage());
  StorageState& st = state_of(t);
  ElementType dtype = to_hlo(t.scalar_type());
  if (!st.value && e.deferring()) {
    hlo::TensorType zeros{dtype, {static_cast<int64_t>(st.nbytes / engine::element_size(dtype))}};
    uint32_t index = 0;
    st.value = e.placeholder(zeros, &index);
    st.dtype = dtype;
    e.defer(engine::DeferredPtr(new DeferredZeros(index, zeros)),
            engine::mix(0x2E2050 + static_cast<uint64_t>(dtype), st.nbytes));
  }
  // A storage holding another dtype (a reinterpreting view) is read by the
  // builder path. (An unwritten one outside a trace only gets a signature.)
  if (st.value ? st.dtype != dtype : e.deferring()) return false;
  if (e.deferring()) r->ref = e.trace_ref(st.value);  // else only the signature is wanted
  r->dtype = dtype;
  r->nbytes = st.nbytes;
  r->whole = whole_and_contiguous(t, st);
  r->sizes.assign(t.sizes().begin(), t.sizes().end());
  if (!r->whole) {
    r->strides.assign(t.strides().begin(), t.strides().end());
    r->offset = t.storage_offset();
  }
  return true;
}

hlo::Value replay_read(engine::Engine& e, const CapturedRead& r) {
  hlo::Value flat = e.trace_input(r.ref);
  if (r.whole) return e.builder().reshape(flat, r.sizes.data(), r.sizes.size());
  lowering::Strided view{{r.sizes.begin(), r.sizes.end()}, {r.strides.begin(), r.strides.end()},
                         r.offset};
  return lowering::strided_read(e.builder(), flat, view);
}

bool can_capture_write(const at::Tensor& t) {
  const StorageState& st = state_of(t);
  if (whole_and_contiguous(t, st)) return true;
  return st.nbytes % t.element_size() == 0 &&
         lowering::covers_densely(view_of(t), static_cast<int64_t>(st.nbytes / t.element_size()));
}

CapturedWrite capture_write(engine::Engine& e, const at::Tensor& t) {
  note_storage(t.storage());
  StorageState& st = state_of(t);
  CapturedWrite w;
  w.dtype = to_hlo(t.scalar_type());
  w.row_major = whole_and_contiguous(t, st);
  w.numel = w.row_major ? t.numel() : static_cast<int64_t>(st.nbytes / t.element_size());
  if (!w.row_major) w.view = view_of(t);
  replace(e, st, e.placeholder(hlo::TensorType{w.dtype, {w.numel}}, &w.index));
  st.dtype = w.dtype;
  return w;
}

void replay_write(engine::Engine& e, const CapturedWrite& w, hlo::Value v) {
  auto& b = e.builder();
  v = b.convert(v, w.dtype);
  e.set_trace_result(w.index, w.row_major ? b.reshape(v, &w.numel, 1)
                                          : lowering::dense_layout(b, v, w.view, w.numel));
}

engine::ValuePtr flat_value(const at::Tensor& src) {
  auto& e = engine::Engine::get();
  auto guard = e.lock();
  note_storage(src.storage());
  StorageState& st = state_of(src);
  ElementType dtype = to_hlo(src.scalar_type());
  Strided view = view_of(src);
  int64_t n = static_cast<int64_t>(st.nbytes / engine::element_size(dtype));
  if (st.value && st.dtype == dtype && view.offset == 0 && view.numel() == n &&
      view.contiguous())
    return st.value;  // the storage is the tensor
  e.begin(st.device);
  engine::ValuePtr value = e.produce(e.builder().reshape(read(e, src), {src.numel()}));
  e.end("to_cpu");
  return value;
}

void assign(const at::Tensor& dst, const engine::ValuePtr& flat) {
  auto& e = engine::Engine::get();
  StorageState& st = state_of(dst);
  ElementType dtype = to_hlo(dst.scalar_type());
  auto guard = e.lock();
  note_storage(dst.storage());
  Strided view = view_of(dst);
  int64_t n = static_cast<int64_t>(st.nbytes / engine::element_size(dtype));
  if (view.offset == 0 && view.numel() == n && view.contiguous() &&
      st.nbytes % engine::element_size(dtype) == 0) {
    st.value = flat;
    st.dtype = dtype;
    return;
  }
  e.begin(st.device);
  write(e, dst, e.builder().reshape(e.use(flat), dst.sizes().vec()));
  e.end("copy_from_cpu");
}

at::Tensor to_cpu(const at::Tensor& src, const char* op) {
  check_host_read(op);
  auto& e = engine::Engine::get();
  at::Tensor out = at::empty(src.sizes(), src.options().device(c10::kCPU));
  if (src.numel() == 0) return out;
  engine::ValuePtr value = flat_value(src);
  try {
    e.to_host(value, out.data_ptr(), out.nbytes());
  } catch (const engine::CheckFailed& failed) {
    TORCH_CHECK_INDEX(!failed.index_error, failed.what());  // IndexError, as on CPU
    TORCH_CHECK(false, failed.what());
  }
  return out;
}

void copy_from_cpu(const at::Tensor& dst, const at::Tensor& src) {
  auto& e = engine::Engine::get();
  if (dst.numel() == 0) return;
  at::Tensor host = src.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
  ElementType dtype = to_hlo(dst.scalar_type());
  engine::ValuePtr uploaded;
  {
    auto guard = e.lock();
    uploaded = e.from_host(host.data_ptr(), hlo::TensorType{dtype, {host.numel()}},
                           state_of(dst).device);
  }
  assign(dst, uploaded);
}

void resize(const at::Tensor& t, c10::IntArrayRef sizes,
            std::optional<c10::IntArrayRef> strides) {
  auto* impl = t.unsafeGetTensorImpl();
  if (strides) impl->set_sizes_and_strides(sizes, *strides);
  else impl->set_sizes_contiguous(sizes);
  int64_t needed = 0;
  if (t.numel() > 0) {
    needed = t.storage_offset() + 1;
    for (int64_t d = 0; d < t.dim(); ++d) needed += (t.size(d) - 1) * t.stride(d);
  }
  size_t bytes = static_cast<size_t>(needed) * t.element_size();
  if (bytes > state_of(t).nbytes) resize_storage(t.storage(), bytes);
}

void resize_storage(const c10::Storage& storage, size_t bytes) {
  StorageState& st = state_of(storage);
  if (bytes == st.nbytes) return;
  auto& e = engine::Engine::get();
  auto guard = e.lock();
  note_storage(storage);
  if (st.value && bytes == 0) {
    st.value = nullptr;  // frees the device array; a regrown storage reads as zeros
  } else if (st.value) {
    // Keep the contents that fit, zeros after them.
    size_t esize = engine::element_size(st.dtype);
    TORCH_CHECK(bytes % esize == 0, "tpu: cannot resize a storage holding ", esize,
                "-byte elements to ", bytes, " bytes (not a whole number of elements)");
    int64_t n = static_cast<int64_t>(bytes / esize);
    e.begin(st.device);
    hlo::Value old = e.use(st.value);
    hlo::Value v = n < old.dim(0) ? e.builder().slice(old, {0}, {n})
                                  : e.builder().pad(old, e.builder().constant(st.dtype, 0), {0},
                                                    {n - old.dim(0)});
    st.value = e.produce(v);
    e.end("resize");
  }
  record_resize(st.device, st.nbytes, bytes);
  st.nbytes = bytes;
  storage.unsafeGetStorageImpl()->set_nbytes(bytes);
}

}  // namespace torch_tpu::aten
