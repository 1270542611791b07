#include "defer.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <c10/util/accumulate.h>

#include <cstring>
#include <optional>
#include <unordered_set>

#include "precision.h"
#include "storage.h"
#include "tensor_io.h"

namespace torch_tpu::aten {

namespace {

using engine::mix;
using lowering::Arg;
using lowering::Args;

// Signatures lowered without error (guarded by the engine lock).
std::unordered_set<uint64_t>& lowered() {
  static std::unordered_set<uint64_t> s;
  return s;
}

uint64_t mix_double(uint64_t h, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  return mix(h, bits);
}

uint64_t mix_ints(uint64_t h, c10::ArrayRef<int64_t> v) {
  h = mix(h, v.size());
  for (int64_t x : v) h = mix(h, static_cast<uint64_t>(x));
  return h;
}

uint64_t mix_type(uint64_t h, const hlo::TensorType& t) {
  return mix_ints(mix(h, static_cast<uint64_t>(t.dtype)), t.shape);
}

// What the lowering of a captured read depends on (not where it reads).
uint64_t mix_read(uint64_t h, const CapturedRead& r) {
  h = mix(h, static_cast<uint64_t>(r.dtype) * 2 + (r.whole ? 1 : 0));
  h = mix(mix_ints(h, r.sizes), r.nbytes);
  if (!r.whole) h = mix(mix_ints(h, r.strides), r.offset);
  return h;
}

// Everything of an Arg but its tensor values (those are slots).
uint64_t mix_arg(uint64_t h, const Arg& a) {
  h = mix(h, static_cast<uint64_t>(a.kind) * 4 + (a.scalar ? 2 : 0) + (a.b ? 1 : 0));
  switch (a.kind) {
    case Arg::kInt: return mix(h, static_cast<uint64_t>(a.i));
    // A generator's offset (i) enters as a program input: lowerings read
    // its tensors only, so a new offset is the same program.
    case Arg::kGenerator: return h;
    case Arg::kDouble: return mix_double(h, a.d);
    case Arg::kIntList: return mix_ints(h, a.ints);
    case Arg::kDoubleList:
      for (double d : a.doubles) h = mix_double(h, d);
      return mix(h, a.doubles.size());
    case Arg::kBoolList:
      for (bool b : a.bools) h = mix(h, b);
      return mix(h, a.bools.size());
    case Arg::kString: return mix(h, std::hash<std::string>()(a.s));
    case Arg::kDtype: return mix(h, static_cast<uint64_t>(a.dtype));
    case Arg::kTensorList: return mix(h, a.tensors.size());
    default: return h;
  }
}

// An input position of a deferred call.
struct Slot {
  enum Kind : uint8_t { kNone, kTensor, kScalar } kind = kNone;
  CapturedRead read;  // kTensor; kScalar uses read.ref and read.dtype
};

// Captures a call's tensors and numbers as slots, hashing what the lowering
// sees into `signature` and how they are bound into `binding`.
class Capture final : public ArgReader {
 public:
  Capture(engine::Engine& e, std::vector<Slot>& slots) : slots(slots), e_(e) {}
  hlo::Value tensor(const at::Tensor& t) override {
    Slot s;
    s.kind = Slot::kTensor;
    if (!capture_read(e_, t, &s.read)) ok = false;
    signature = mix_read(signature, s.read);
    binding = mix(binding, s.read.ref.key());
    slots.push_back(std::move(s));
    return {};
  }
  hlo::Value scalar(hlo::ElementType dtype, const engine::ScalarBits& bits) override {
    Slot s;
    s.kind = Slot::kScalar;
    s.read.dtype = dtype;
    if (e_.deferring()) s.read.ref = e_.trace_buffer(e_.scalar_buffer(dtype, bits), dtype);
    signature = mix(signature, 0x5CA1A0 + static_cast<uint64_t>(dtype));
    binding = mix(binding, s.read.ref.key());
    slots.push_back(std::move(s));
    return {};
  }
  void none() override {
    signature = mix(signature, 0x404E);
    slots.emplace_back();
  }

  std::vector<Slot>& slots;
  uint64_t signature = 0, binding = 0;
  bool ok = true;

 private:
  engine::Engine& e_;
};

// An op recorded by try_defer, lowered on Engine::to_builder.
class DeferredCall final : public engine::DeferredOp {
 public:
  // A call from the pool (or a new one), empty. Engine lock held.
  static DeferredCall* take() {
    if (pool().empty()) return new DeferredCall();
    DeferredCall* c = pool().back();
    pool().pop_back();
    return c;
  }
  // Back to the pool, keeping its vectors' memory: a steady loop records
  // the same calls every step, and allocating them anew was a quarter of
  // the recording's cost. Engine lock held.
  void release() override {
    args.clear();
    slots.clear();
    writes.clear();
    meta.reset();
    if (pool().size() < kPoolSize) pool().push_back(this);
    else delete this;
  }

  const Plan* plan = nullptr;
  std::shared_ptr<const OpMeta> meta;
  Args args;                          // tensors invalid: they are slots
  std::vector<Slot> slots;            // every tensor position of args, in order
  std::vector<CapturedWrite> writes;  // fresh results, then written arguments
  std::optional<lowering::Precision> precision;  // when the lowering reads it

  void lower(engine::Engine& e) override {
    size_t k = 0;
    auto next = [&]() -> hlo::Value {
      const Slot& s = slots.at(k++);
      if (s.kind == Slot::kTensor) return replay_read(e, s.read);
      if (s.kind == Slot::kScalar) return e.trace_input(s.read.ref);
      return {};
    };
    for (Arg& a : args) {
      if (a.kind == Arg::kTensor) a.tensor = next();
      if (a.kind == Arg::kTensorList || a.kind == Arg::kGenerator)
        for (hlo::Value& v : a.tensors) v = next();
    }
    hlo::Values outs = lower_call(e, *plan, *meta,
                                  precision ? lowering::LazyPrecision(*precision)
                                            : lowering::LazyPrecision(&current_precision),
                                  args, /*op=*/nullptr);
    TORCH_CHECK(outs.size() == writes.size(), "tpu: internal error: deferred ", plan->lowering,
                " returned ", outs.size(), " values, expected ", writes.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      replay_write(e, writes[i], outs[i]);
    }
  }

 private:
  static constexpr size_t kPoolSize = 8192;
  static std::vector<DeferredCall*>& pool() {
    static auto* p = new std::vector<DeferredCall*>();  // outlives every recording
    return *p;
  }
};

// A copy between tensors of one tpu device (core_ops' copy_), deferred.
class DeferredCopy final : public engine::DeferredOp {
 public:
  DeferredCopy(CapturedRead src, CapturedWrite dst, std::vector<int64_t> sizes)
      : src_(std::move(src)), dst_(std::move(dst)), sizes_(std::move(sizes)) {}
  void lower(engine::Engine& e) override {
    auto& b = e.builder();
    hlo::Value v = b.convert(replay_read(e, src_), dst_.dtype);
    replay_write(e, dst_, b.broadcast_to(v, sizes_));
  }

 private:
  CapturedRead src_;
  CapturedWrite dst_;
  std::vector<int64_t> sizes_;
};

// Whether a result of `m`'s layout covers its fresh storage densely.
bool dense(const TensorMeta& m) {
  return lowering::covers_densely({m.sizes, m.strides, 0}, c10::multiply_integers(m.sizes));
}

}  // namespace

void note_lowered(uint64_t signature) {
  if (signature) lowered().insert(signature);
}

bool was_lowered(uint64_t signature) { return lowered().count(signature) > 0; }

bool try_defer(engine::Engine& e, const c10::FunctionSchema& schema, const Plan& plan,
               c10::ArrayRef<c10::IValue> args, CallState& state,
               const std::shared_ptr<const OpMeta>& meta_ptr, c10::ArrayRef<at::Tensor> mutated,
               c10::SmallVectorImpl<at::Tensor>& results, uint64_t* signature) {
  *signature = 0;
  const OpMeta& meta = *meta_ptr;
  // Writes must replace whole storages: fresh results are dense, written
  // arguments keep their size and cover their storage.
  // An out= argument resized by the call must have no contents to keep (as
  // a fresh `empty` has) and end up covering its storage.
  for (const TensorMeta& m : meta.fresh)
    if (!dense(m)) return false;
  c10::SmallVector<bool, 2> resized;
  for (size_t i = 0; i < mutated.size(); ++i) {
    const at::Tensor& t = mutated[i];
    const TensorMeta& m = meta.mutated[i];
    resized.push_back(t.sizes() != c10::IntArrayRef(m.sizes));
    if (!resized.back() ? !can_capture_write(t)
                        : state_of(t).value || t.storage_offset() != 0 || !dense(m) ||
                              state_of(t).nbytes > c10::multiply_integers(m.sizes) * t.element_size())
      return false;
  }

  // (While the recording is in the builder this only computes the signature.)
  engine::DeferredPtr taken(DeferredCall::take());  // back to the pool unless deferred
  auto* call = static_cast<DeferredCall*>(taken.get());
  Capture capture(e, call->slots);
  Args& largs = call->args;
  largs.reserve(plan.inputs.size() + 1);
  uint64_t sig = mix(reinterpret_cast<uintptr_t>(&plan), plan.inputs.size());
  for (size_t i : plan.inputs) {
    largs.push_back(input_arg(plan, capture, schema, args, i, state));
    sig = mix_arg(sig, largs.back());
    if (!capture.ok) return false;
  }
  if (plan.implicit_generator) {
    static const c10::Argument generator("generator",
                                         c10::OptionalType::create(c10::GeneratorType::get()));
    largs.push_back(convert(capture, generator, c10::IValue(), state));
    sig = mix_arg(sig, largs.back());
  }
  sig = mix(sig, capture.signature);
  for (const hlo::TensorType& t : meta.types) sig = mix_type(sig, t);
  for (const TensorMeta& m : meta.fresh) sig = mix_ints(sig, m.strides);  // dense layouts
  for (const TensorMeta& m : meta.mutated) sig = mix_ints(sig, m.strides);
  if (plan.reads_precision) {
    call->precision = current_precision();
    sig = mix(sig, static_cast<uint64_t>(*call->precision) + 1);
  } else {
    call->precision.reset();
  }
  sig += sig == 0;  // 0 means "not deferrable"
  *signature = sig;
  if (!e.deferring() || !lowered().count(sig)) return false;

  call->plan = &plan;
  call->meta = meta_ptr;
  for (const TensorMeta& m : meta.fresh) {
    at::Tensor t = at::detail::empty_strided_generic(
        m.sizes, m.strides, allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
        m.dtype);
    call->writes.push_back(capture_write(e, t));
    results.push_back(std::move(t));
  }
  for (size_t i = 0; i < mutated.size(); ++i) {
    const at::Tensor& t = mutated[i];
    if (resized[i]) resize(t, meta.mutated[i].sizes, meta.mutated[i].strides);  // metadata only
    call->writes.push_back(capture_write(e, t));
  }
  e.defer(std::move(taken), mix(sig, capture.binding));
  return true;
}

bool try_defer_copy(engine::Engine& e, const at::Tensor& src, const at::Tensor& dst) {
  if (!e.deferring() || !can_capture_write(dst) || !at::is_expandable_to(src.sizes(), dst.sizes()))
    return false;
  CapturedRead read;
  if (!capture_read(e, src, &read)) return false;
  hlo::ElementType dtype = to_hlo(dst.scalar_type());
  uint64_t key = mix_ints(mix(mix_read(0xC0B1, read), static_cast<uint64_t>(dtype)),
                          dst.sizes());
  key = mix(key, read.ref.key());
  key = mix_ints(key, dst.strides());
  e.defer(engine::DeferredPtr(new DeferredCopy(std::move(read), capture_write(e, dst),
                                                dst.sizes().vec())),
          key);
  return true;
}

}  // namespace torch_tpu::aten
