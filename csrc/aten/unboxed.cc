#include "unboxed.h"

#include <ATen/core/ivalue.h>
#include <torch/library.h>

#include <array>
#include <type_traits>

#include "kernel.h"

namespace torch_tpu::aten {

namespace {

using T = const at::Tensor&;  // a tensor read
using W = at::Tensor&;        // a tensor written (in-place self, out=)
using S = const c10::Scalar&;

// The schema letter each C++ parameter type binds to.
template <class P>
constexpr char letter() {
  if constexpr (std::is_same_v<P, T> || std::is_same_v<P, at::Tensor>) return 'T';
  else if constexpr (std::is_same_v<P, W>) return 'W';
  else if constexpr (std::is_same_v<P, S>) return 'S';
  else return '?';
}

char letter(const c10::Argument& a) {
  const c10::AliasInfo* alias = a.alias_info();
  if (a.type()->kind() == c10::TypeKind::TensorType) {
    if (alias == nullptr) return 'T';
    return alias->isWrite() ? 'W' : '?';  // a view: not a lowered op's shape
  }
  if (a.type()->kind() == c10::TypeKind::NumberType && alias == nullptr) return 'S';
  return '?';
}

c10::IValue borrow(const at::Tensor& t) {
  return c10::IValue(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(t));
}
c10::IValue borrow(const c10::Scalar& s) { return c10::IValue(s); }

// Arguments as IValues that borrow the caller's tensors: no refcount moves.
template <size_t N>
struct Borrowed {
  std::array<c10::IValue, N> values;
  ~Borrowed() {
    for (c10::IValue& v : values)
      if (v.isTensor()) c10::MaybeOwnedTraits<c10::IValue>::destroyBorrow(v);
  }
};

// The one written tensor parameter: what an in-place or out= op returns.
inline void pick(at::Tensor*& w, at::Tensor& t) { w = &t; }
template <class X>
void pick(at::Tensor*&, const X&) {}
template <class... P>
at::Tensor& written(P&&... p) {
  at::Tensor* w = nullptr;
  (pick(w, p), ...);
  return *w;
}

template <class Sig>
struct Kernel;

template <class Ret, class... P>
struct Kernel<Ret(P...)> {
  static bool fits(const c10::FunctionSchema& s) {
    constexpr std::array<char, sizeof...(P)> want{letter<P>()...};
    if (s.arguments().size() != want.size() || s.returns().size() != 1) return false;
    for (size_t i = 0; i < want.size(); ++i)
      if (letter(s.arguments()[i]) != want[i]) return false;
    return letter(s.returns()[0]) == letter<Ret>();
  }

  static torch::CppFunction make(const c10::OperatorHandle& op, const Plan* plan) {
    return torch::CppFunction([op, plan](P... p) -> Ret {
      Borrowed<sizeof...(P)> args{{borrow(p)...}};
      Ran ran = run_lowered(op, *plan, args.values);
      if constexpr (std::is_same_v<Ret, at::Tensor>) {
        TORCH_CHECK(ran.results.size() == 1, "tpu: internal error: ", op.schema().name(),
                    " made ", ran.results.size(), " results, expected 1");
        return std::move(ran.results[0]);
      } else {
        return written(p...);
      }
    });
  }
};

using R = at::Tensor;  // a fresh result

// The signatures served unboxed: the pointwise, in-place and out= shapes
// that training loops and optimizers call most.
template <class... Sigs>
bool register_first(torch::Library& m, const char* name, const c10::OperatorHandle& op,
                    const Plan* plan) {
  const c10::FunctionSchema& s = op.schema();
  bool done = false;
  auto one = [&](auto fits, auto make) {
    if (done || !fits(s)) return;
    m.impl(name, make(op, plan));
    done = true;
  };
  (one(&Kernel<Sigs>::fits, &Kernel<Sigs>::make), ...);
  return done;
}

}  // namespace

bool register_unboxed(torch::Library& m, const char* name, const c10::OperatorHandle& op,
                      const Plan& plan) {
  return register_first<
      // functional
      R(T), R(T, T), R(T, S), R(S, T), R(T, T, S), R(T, S, S), R(T, T, T), R(T, T, T, S),
      R(T, T, T, S, S),
      // in-place
      W(W), W(W, T), W(W, S), W(W, T, S), W(W, S, S), W(W, T, T), W(W, T, T, S),
      W(W, T, T, S, S),
      // out=
      W(T, W), W(T, T, W), W(T, S, W), W(T, T, S, W), W(T, T, T, W), W(T, T, T, S, W)>(
      m, name, op, &plan);
}

}  // namespace torch_tpu::aten
