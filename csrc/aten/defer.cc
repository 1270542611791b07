#include "defer.h"

#include <ATen/EmptyTensor.h>

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

uint64_t mix_ints(uint64_t h, const std::vector<int64_t>& v) {
  h = mix(h, v.size());
  for (int64_t x : v) h = mix(h, static_cast<uint64_t>(x));
  return h;
}

uint64_t mix_type(uint64_t h, const hlo::TensorType& t) {
  return mix_ints(mix(h, static_cast<uint64_t>(t.dtype)), t.shape);
}

// Everything of an Arg but its tensor values (those are slots).
uint64_t mix_arg(uint64_t h, const Arg& a) {
  h = mix(h, static_cast<uint64_t>(a.kind) * 4 + (a.scalar ? 2 : 0) + (a.b ? 1 : 0));
  switch (a.kind) {
    case Arg::kInt: return mix(h, static_cast<uint64_t>(a.i));
    // A generator's offset (i) enters as a program input: lowerings read
    // its tensors only, so a new offset is the same program.
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
  explicit Capture(engine::Engine& e) : e_(e) {}
  hlo::Value tensor(const at::Tensor& t) override {
    Slot s;
    s.kind = Slot::kTensor;
    if (!capture_read(e_, t, &s.read)) ok = false;
    const CapturedRead& r = s.read;
    signature = mix(signature, static_cast<uint64_t>(r.dtype) * 2 + (r.whole ? 1 : 0));
    signature = mix(mix_ints(signature, r.view.sizes), r.nbytes);
    if (!r.whole) signature = mix(mix_ints(signature, r.view.strides), r.view.offset);
    binding = mix(binding, r.ref.key());
    slots.push_back(std::move(s));
    return {};
  }
  hlo::Value scalar(hlo::ElementType dtype, uint64_t bits) override {
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

  std::vector<Slot> slots;
  uint64_t signature = 0, binding = 0;
  bool ok = true;

 private:
  engine::Engine& e_;
};

// An op recorded by try_defer, lowered on Engine::to_builder.
class DeferredCall final : public engine::DeferredOp {
 public:
  DeferredCall(const Plan& plan, std::shared_ptr<const OpMeta> meta, Args args,
               std::vector<Slot> slots, std::optional<lowering::Precision> precision)
      : plan_(plan), meta_(std::move(meta)), args_(std::move(args)), slots_(std::move(slots)),
        precision_(precision) {}

  std::vector<uint32_t> results;           // the placeholders written, in order
  std::vector<hlo::ElementType> dtypes;    // of the tensors written, in order

  void lower(engine::Engine& e) override {
    size_t k = 0;
    auto next = [&]() -> hlo::Value {
      const Slot& s = slots_.at(k++);
      if (s.kind == Slot::kTensor) return replay_read(e, s.read);
      if (s.kind == Slot::kScalar) return e.trace_input(s.read.ref);
      return {};
    };
    for (Arg& a : args_) {
      if (a.kind == Arg::kTensor) a.tensor = next();
      if (a.kind == Arg::kTensorList || a.kind == Arg::kGenerator)
        for (hlo::Value& v : a.tensors) v = next();
    }
    lowering::Context ctx{e.builder(), meta_->types,
                          precision_ ? lowering::LazyPrecision(*precision_)
                                     : lowering::LazyPrecision(&current_precision),
                          plan_.lowering};
    hlo::Values outs;
    try {
      outs = (*plan_.fn)(ctx, args_);
    } catch (const std::exception& err) {
      TORCH_CHECK(false, "tpu: internal error lowering deferred ", plan_.lowering, ": ", err.what());
    }
    TORCH_CHECK(outs.size() == results.size(), "tpu: internal error: deferred ", plan_.lowering,
                " returned ", outs.size(), " values, expected ", results.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      TORCH_CHECK(outs[i].shape() == ctx.outputs[i].shape, "tpu: internal error: deferred ",
                  plan_.lowering, " produced ", outs[i].type().str(), " for output ", i);
      replay_write(e, results[i], outs[i], dtypes[i]);
    }
  }


 private:
  const Plan& plan_;
  std::shared_ptr<const OpMeta> meta_;
  Args args_;
  std::vector<Slot> slots_;
  std::optional<lowering::Precision> precision_;
};

bool contiguous(const TensorMeta& m) {
  int64_t expected = 1;
  for (size_t i = m.sizes.size(); i-- > 0;) {
    if (m.sizes[i] == 1) continue;
    if (m.strides[i] != expected) return false;
    expected *= m.sizes[i];
  }
  return true;
}

}  // namespace

void note_lowered(uint64_t signature) {
  if (signature) lowered().insert(signature);
}

bool try_defer(engine::Engine& e, const c10::FunctionSchema& schema, const Plan& plan,
               c10::ArrayRef<c10::IValue> args, CallState& state,
               const std::shared_ptr<const OpMeta>& meta_ptr, c10::ArrayRef<at::Tensor> mutated,
               c10::SmallVectorImpl<at::Tensor>& results, uint64_t* signature) {
  *signature = 0;
  const OpMeta& meta = *meta_ptr;
  // Writes must replace whole storages: fresh results are dense, written
  // arguments keep their size and cover their storage.
  for (const TensorMeta& m : meta.fresh)
    if (!contiguous(m)) return false;
  for (size_t i = 0; i < mutated.size(); ++i)
    if (mutated[i].sizes() != c10::IntArrayRef(meta.mutated[i].sizes) ||
        !can_capture_write(mutated[i]))
      return false;

  Capture capture(e);
  Args largs;
  // (While the recording is in the builder this only computes the signature.)
  largs.reserve(plan.inputs.size());
  uint64_t sig = mix(reinterpret_cast<uintptr_t>(&plan), plan.inputs.size());
  for (size_t i : plan.inputs) {
    if (omits(plan, args, i))
      largs.emplace_back();
    else
      largs.push_back(convert(capture, schema.arguments()[i], args[i], state));
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
  std::optional<lowering::Precision> precision;
  if (plan.reads_precision) {
    precision = current_precision();
    sig = mix(sig, static_cast<uint64_t>(*precision) + 1);
  }
  sig += sig == 0;  // 0 means "not deferrable"
  *signature = sig;
  if (!e.deferring() || !lowered().count(sig)) return false;

  auto call = std::make_unique<DeferredCall>(plan, meta_ptr, std::move(largs),
                                             std::move(capture.slots), precision);
  for (const TensorMeta& m : meta.fresh) {
    at::Tensor t = at::detail::empty_strided_generic(
        m.sizes, m.strides, allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
        m.dtype);
    call->dtypes.push_back(to_hlo(m.dtype));
    call->results.push_back(capture_write(e, t));
    results.push_back(std::move(t));
  }
  for (const at::Tensor& t : mutated) {
    call->dtypes.push_back(to_hlo(t.scalar_type()));
    call->results.push_back(capture_write(e, t));
  }
  e.defer(std::move(call), mix(sig, capture.binding));
  return true;
}

}  // namespace torch_tpu::aten
