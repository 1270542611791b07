// A typed StableHLO builder. Values carry their tensor types; each op method
// checks its operands, infers (or checks) the result type and appends one
// operation. `module()` prints the function as MLIR text in the generic op
// form, the spelling every plugin version parses.
#pragma once

#include <deque>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kernel.h"
#include "types.h"

namespace torch_tpu::hlo {

class Builder;

// Ends the printed line of an op that takes or makes the bf16 copy of an f32
// value already rounded to bf16 (a dot's split operand), followed by the
// dot's group number: the program means the same with those types read as
// f32 (engine::compile_checked falls back to that, per group, when XLA:CPU
// would run such a dot in a kernel without bf16 x bf16 -> f32). The ops of a
// group also carry loc("tt_bf16_dot_<group>"), which XLA keeps as the
// op_name metadata of the optimized dot.
inline constexpr std::string_view kBf16SplitMarker = " // tt:bf16-split ";
inline constexpr std::string_view kBf16SplitLoc = "tt_bf16_dot_";

// An SSA value of a Builder. Cheap to copy; valid while its Builder lives.
class Value {
 public:
  Value() = default;
  bool valid() const { return type_ != nullptr; }
  int id() const { return id_; }
  const TensorType& type() const { return *type_; }
  ElementType dtype() const { return type_->dtype; }
  const std::vector<int64_t>& shape() const { return type_->shape; }
  int64_t rank() const { return type_->rank(); }
  int64_t dim(int64_t i) const { return type_->shape.at(i); }

 private:
  friend class Builder;
  Value(int id, const TensorType* type) : id_(id), type_(type) {}
  int id_ = -1;
  const TensorType* type_ = nullptr;  // owned by the Builder's type table
};

using Values = std::vector<Value>;
// Builds the body of a region (reduce, sort, scatter, ...) from its block
// arguments and returns the values to yield.
using RegionFn = std::function<Values(Builder&, const Values&)>;

enum class Compare { kEQ, kNE, kLT, kLE, kGT, kGE };

// How triangular_solve applies A: as is, transposed, or conjugate-transposed
// (the same as transposed for real types).
enum class Transpose { kNone, kTranspose, kAdjoint };

struct GatherDims {
  std::vector<int64_t> offset_dims, collapsed_slice_dims, operand_batching_dims,
      start_indices_batching_dims, start_index_map;
  int64_t index_vector_dim = 0;
};

struct ScatterDims {
  std::vector<int64_t> update_window_dims, inserted_window_dims,
      input_batching_dims, scatter_indices_batching_dims,
      scatter_dims_to_operand_dims;
  int64_t index_vector_dim = 0;
};

struct ConvDims {
  int64_t input_batch = 0, input_feature = 1;
  std::vector<int64_t> input_spatial;
  int64_t kernel_output_feature = 0, kernel_input_feature = 1;
  std::vector<int64_t> kernel_spatial;
  int64_t output_batch = 0, output_feature = 1;
  std::vector<int64_t> output_spatial;
};

struct ConvOptions {
  std::vector<int64_t> window_strides, lhs_dilation, rhs_dilation;
  std::vector<std::pair<int64_t, int64_t>> padding;
  int64_t feature_group_count = 1, batch_group_count = 1;
};

// A 128-bit structural digest of a builder's program: equal programs have
// equal fingerprints within one process (types and op names are interned, so
// it is not stable across processes; key anything persistent by the text).
struct Fingerprint {
  uint64_t a = 0, b = 0;
  bool operator==(const Fingerprint& o) const { return a == o.a && b == o.b; }
};
struct FingerprintHash {
  size_t operator()(const Fingerprint& f) const { return static_cast<size_t>(f.a ^ (f.b * 31)); }
};

class Builder {
 public:
  Builder();
  // Forgets the program, keeping the memory for the next one.
  void clear();

  // ---- function signature -------------------------------------------------
  Value parameter(const TensorType& type);
  void set_results(const Values& results);
  const Values& parameters() const { return params_; }
  const Values& results() const { return results_; }
  // Marks parameter `index` as donated: its buffer may be reused for outputs.
  void set_donated(size_t index);
  // The program takes parameter `index` as `type` (same element type and
  // count, other dimensions) and reshapes it on entry to the type the body
  // uses: a donated flat buffer taken in the shape of the result that
  // overwrites it, so that XLA updates it in place (a row-major target,
  // whose buffers do not depend on their dimensions: hlo::Target).
  void take_parameter_as(size_t index, const TensorType& type);
  // Donated parameter `index` is overwritten by result `result`, of `type`
  // (the parameter's type as taken: TypeError otherwise): XLA writes that
  // result into the parameter's buffer (`tf.aliasing_output`). A donor
  // alone (`jax.buffer_donor`) lets XLA give its buffer to any result of
  // its shape, and XLA:CPU paired a foreach AdamW step's new moments with
  // the parameters' buffers, whose old values it then copied on entry.
  void alias_result(size_t index, size_t result, const TensorType& type);

  // ---- run-time checks ------------------------------------------------------
  // A condition the program tests as it runs (an index in range): `violated`
  // is an i1 scalar, `message` what went wrong; `tag` is what the caller set
  // with set_check_tag (the engine: which recorded op). The program's runner
  // reads them (engine: one i32 result, the first violated check or -1).
  struct Check {
    Value violated;
    std::string message;
    int64_t tag;
    bool index_error;  // an index out of range (else another invalid value)
  };
  // Records a check (nothing when checks are off).
  void check(Value violated, std::string message, bool index_error = true);
  bool checks_enabled() const { return checks_enabled_; }
  void set_checks_enabled(bool on) { checks_enabled_ = on; }
  void set_check_tag(int64_t tag) { check_tag_ = tag; }
  const std::vector<Check>& checks() const { return checks_; }

  // The module as MLIR text; the function is public @main.
  std::string module() const;
  // What module() would print, digested without printing (see Fingerprint).
  Fingerprint fingerprint() const;
  size_t num_ops() const { return num_ops_; }

  // ---- constants and shapes ----------------------------------------------
  Value constant(ElementType dtype, double value);  // scalar
  Value constant_int(ElementType dtype, int64_t value);
  Value constant_bits(ElementType dtype, uint64_t bits);  // scalar, raw bits
  Value constant_i64_vector(const std::vector<int64_t>& values);
  Value full(const TensorType& type, double value);  // broadcast scalar
  Value zeros(const TensorType& type) { return full(type, 0.0); }
  Value iota(const TensorType& type, int64_t dim);

  // ---- elementwise -------------------------------------------------------
  Value add(Value a, Value b) { return binary("stablehlo.add", a, b); }
  Value sub(Value a, Value b) { return binary("stablehlo.subtract", a, b); }
  Value mul(Value a, Value b) { return binary("stablehlo.multiply", a, b); }
  Value div(Value a, Value b) { return binary("stablehlo.divide", a, b); }
  Value rem(Value a, Value b) { return binary("stablehlo.remainder", a, b); }
  Value pow(Value a, Value b) { return binary("stablehlo.power", a, b); }
  Value max(Value a, Value b) { return binary("stablehlo.maximum", a, b); }
  Value min(Value a, Value b) { return binary("stablehlo.minimum", a, b); }
  Value and_(Value a, Value b) { return binary("stablehlo.and", a, b); }
  Value or_(Value a, Value b) { return binary("stablehlo.or", a, b); }
  Value xor_(Value a, Value b) { return binary("stablehlo.xor", a, b); }
  Value atan2(Value a, Value b) { return binary("stablehlo.atan2", a, b); }
  Value shift_left(Value a, Value b) { return binary("stablehlo.shift_left", a, b); }
  Value shift_right_arithmetic(Value a, Value b) {
    return binary("stablehlo.shift_right_arithmetic", a, b);
  }
  Value shift_right_logical(Value a, Value b) {
    return binary("stablehlo.shift_right_logical", a, b);
  }
  // Any same-type binary op by name (stablehlo.* or chlo.*).
  Value binary(std::string_view name, Value a, Value b);
  // Any same-type unary op by name, e.g. "stablehlo.exponential", "chlo.erf".
  Value unary(std::string_view name, Value x);
  Value neg(Value x) { return unary("stablehlo.negate", x); }
  Value abs(Value x);  // complex → real
  Value exp(Value x) { return unary("stablehlo.exponential", x); }
  Value log(Value x) { return unary("stablehlo.log", x); }
  Value sqrt(Value x) { return unary("stablehlo.sqrt", x); }
  Value rsqrt(Value x) { return unary("stablehlo.rsqrt", x); }
  Value tanh(Value x) { return unary("stablehlo.tanh", x); }
  Value logistic(Value x) { return unary("stablehlo.logistic", x); }
  Value floor(Value x) { return unary("stablehlo.floor", x); }
  Value ceil(Value x) { return unary("stablehlo.ceil", x); }
  Value not_(Value x) { return unary("stablehlo.not", x); }
  Value is_finite(Value x);  // → i1
  Value compare(Compare direction, Value a, Value b);  // → i1
  Value select(Value pred, Value on_true, Value on_false);
  Value clamp(Value lo, Value x, Value hi);
  Value convert(Value x, ElementType dtype);
  // A convert emitted even when `x` already has `dtype` (a no-op to XLA).
  Value convert_as_written(Value x, ElementType dtype);
  Value bitcast_convert(Value x, const TensorType& type);
  Value reduce_precision(Value x, int exponent_bits, int mantissa_bits);
  // Marks the op that made `x` as one of group `group` (see kBf16SplitMarker).
  void mark_bf16_split(Value x, int group);

  // ---- shape -------------------------------------------------------------
  Value reshape(Value x, const std::vector<int64_t>& shape);
  // The same from `rank` dimensions at `dims`: nothing is copied unless a
  // reshape is emitted (the per-op read and write paths).
  Value reshape(Value x, const int64_t* dims, size_t rank);
  Value broadcast_in_dim(Value x, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& dims);
  // Numpy-style: aligns trailing dims of x with `shape`.
  Value broadcast_to(Value x, const std::vector<int64_t>& shape);
  Value transpose(Value x, const std::vector<int64_t>& permutation);
  // When `v` is a transpose made in the function body: its operand and
  // permutation (so a contraction can take the operand as it is laid out).
  bool transposed(Value v, Value* source, std::vector<int64_t>* permutation) const;
  // When `v` is a reshape made in the function body: the value it reshapes
  // (else `v` itself).
  Value reshaped_from(Value v) const;
  Value slice(Value x, const std::vector<int64_t>& start,
              const std::vector<int64_t>& limit,
              const std::vector<int64_t>& strides = {});
  Value dynamic_slice(Value x, const Values& starts,
                      const std::vector<int64_t>& sizes);
  Value dynamic_update_slice(Value x, Value update, const Values& starts);
  Value concatenate(const Values& xs, int64_t dim);
  Value pad(Value x, Value padding_value, const std::vector<int64_t>& low,
            const std::vector<int64_t>& high,
            const std::vector<int64_t>& interior = {});
  Value reverse(Value x, const std::vector<int64_t>& dims);

  // ---- contractions ------------------------------------------------------
  // Result dtype defaults to the operands'; `precision` is "DEFAULT", "HIGH"
  // or "HIGHEST" (the TPU pass count hint).
  Value dot_general(Value lhs, Value rhs, const std::vector<int64_t>& lhs_batch,
                    const std::vector<int64_t>& rhs_batch,
                    const std::vector<int64_t>& lhs_contract,
                    const std::vector<int64_t>& rhs_contract,
                    ElementType result_dtype, const std::string& precision = "");
  Value convolution(Value lhs, Value rhs, const TensorType& result,
                    const ConvDims& dims, const ConvOptions& options);

  // ---- regions -----------------------------------------------------------
  Values reduce(const Values& inputs, const Values& inits,
                const std::vector<int64_t>& dims, const RegionFn& body);
  Values reduce_window(const Values& inputs, const Values& inits,
                       const std::vector<int64_t>& window,
                       const std::vector<int64_t>& strides,
                       const std::vector<int64_t>& base_dilations,
                       const std::vector<int64_t>& window_dilations,
                       const std::vector<std::pair<int64_t, int64_t>>& padding,
                       const RegionFn& body);
  Value select_and_scatter(Value operand, Value source, Value init,
                           const std::vector<int64_t>& window,
                           const std::vector<int64_t>& strides,
                           const std::vector<std::pair<int64_t, int64_t>>& padding,
                           const RegionFn& select, const RegionFn& scatter);
  Values sort(const Values& inputs, int64_t dim, bool stable,
              const RegionFn& comparator);
  Value gather(Value operand, Value indices, const GatherDims& dims,
               const std::vector<int64_t>& slice_sizes, const TensorType& result,
               bool indices_are_sorted = false);
  Value scatter(Value operand, Value indices, Value updates,
                const ScatterDims& dims, const RegionFn& update,
                bool indices_are_sorted = false, bool unique_indices = false);
  // Returns {new_state, bits}; algorithm is "DEFAULT", "THREE_FRY" or "PHILOX".
  Values rng_bit_generator(Value state, const TensorType& result,
                           const std::string& algorithm = "THREE_FRY");
  Value cholesky(Value a, bool lower);
  Value triangular_solve(Value a, Value b, bool left_side, bool lower,
                         bool unit_diagonal, Transpose transpose_a);
  // While loop over `init`; `cond` yields one i1 scalar, `body` the new state.
  Values while_loop(const Values& init, const RegionFn& cond, const RegionFn& body);

  // ---- collectives (collectives.cc) -----------------------------------------
  // Cross-replica ops of a program compiled for several replicas. `groups`
  // lists the replica ids of each group (every replica in exactly one).
  using ReplicaGroups = std::vector<std::vector<int64_t>>;
  Value all_reduce(Value x, const ReplicaGroups& groups, const RegionFn& combine);
  Value all_gather(Value x, int64_t dim, const ReplicaGroups& groups);
  Value reduce_scatter(Value x, int64_t dim, const ReplicaGroups& groups,
                       const RegionFn& combine);
  Value all_to_all(Value x, int64_t split_dim, int64_t concat_dim, const ReplicaGroups& groups);
  // Each pair {source, target}: target receives source's x (others: zeros).
  Value collective_permute(Value x, const std::vector<std::pair<int64_t, int64_t>>& pairs);
  Value replica_id();  // tensor<ui32>

  // ---- custom kernels ------------------------------------------------------
  // Calls a user's StableHLO function (kernel.h) on `args`, whose types must
  // be its parameters' (TypeError naming the mismatch otherwise); the
  // kernel's functions are printed into the module once.
  Values call(const KernelPtr& kernel, const Values& args);

  // Escape hatch for ops without a method yet: explicit result types and
  // pre-formatted attributes ("{...}" or "").
  Values op(std::string_view name, const Values& operands,
            const std::vector<TensorType>& result_types, std::string attributes = {});

  // ---- attribute spelling (shared with lowerings that use op()) ------------
  static std::string i64_array(const std::vector<int64_t>& v);   // array<i64: 1, 2>
  static std::string i64_dense(const std::vector<int64_t>& v);   // dense<[1, 2]> : tensor<2xi64>

 private:
  // One operation. Its results are the consecutive value ids
  // [first_result, first_result + num_results); its operands a run of
  // operands_. Names and types are interned: pointers compare and hash.
  struct Op {
    const std::string* name;
    int first_operand, num_operands;
    int first_result, num_results;
    std::string attributes;
    std::vector<int> regions;  // indices into blocks_
    int bf16_split = -1;       // the group printed with kBf16SplitMarker
  };
  struct Block {
    std::vector<int> args;
    std::vector<Op> ops;
  };

  Value new_value(const TensorType& type);
  // Appends an op on `operands` with results of `result_types`; returns the
  // first result's id.
  // `interned`: the result types are already interned (values' types).
  int append(std::string_view name, const Value* operands, size_t num_operands,
             const TensorType* const* result_types, size_t num_results,
             std::string attributes, std::vector<int> regions, bool interned = false);
  Values emit(std::string_view name, const Values& operands,
              const std::vector<TensorType>& result_types, std::string attributes,
              std::vector<int> regions = {});
  // The common single-result op, without building vectors.
  Value emit1(std::string_view name, std::initializer_list<Value> operands,
              const TensorType& result, std::string attributes = {});
  // A single result of `like`'s type.
  Value emit_like(std::string_view name, std::initializer_list<Value> operands, Value like,
                  std::string attributes = {});
  // Builds a region whose block takes `arg_types` and yields body's results.
  int region(const std::vector<TensorType>& arg_types, const RegionFn& body);
  void print_block(std::string& out, const Block& block, int indent) const;
  const TensorType& type_of(int id) const { return *types_[id]; }

  std::vector<const TensorType*> types_;  // value id → interned type
  // Reshapes in the function body, by value id: the value a reshape result
  // was made from, and the latest reshape made of a value (-1: none). Lets
  // reshape() fold chains (a read after a write) and reuse repeats.
  struct Reshapes {
    int source = -1, latest = -1;
    int transpose = -1;  // index into transposes_ when the value is a transpose
  };
  std::vector<Reshapes> reshapes_;
  std::vector<std::pair<int, std::vector<int64_t>>> transposes_;  // (operand id, permutation)
  // Scalar constants and broadcasts of rank-0 values already made, per block
  // (a value made in a region is not visible outside it): lowerings splat the
  // same few numbers over and over, and each would cost a formatted attribute.
  struct MemoKey {
    uint64_t a, b;
    bool operator==(const MemoKey&) const = default;
  };
  struct MemoHash {
    size_t operator()(const MemoKey& k) const { return k.a * 0x9E3779B97F4A7C15ull ^ k.b; }
  };
  std::unordered_map<MemoKey, int, MemoHash> constants_, splats_;
  std::vector<int> operands_;             // the operand ids of all ops
  std::vector<Block> blocks_;             // blocks_[0] is the function body
  std::vector<int> insertion_;            // stack of block indices being built
  Values params_, results_;
  std::vector<bool> donated_;
  std::vector<const TensorType*> taken_as_;  // per parameter; null: as declared
  std::vector<int> aliased_;                 // per parameter: its result, or -1
  std::vector<Check> checks_;
  std::vector<KernelPtr> kernels_;  // called by this program, each once
  bool checks_enabled_ = true;
  int64_t check_tag_ = 0;
  size_t num_ops_ = 0;
  Fingerprint running_;  // digest of everything appended so far
};

// `module` (Builder::module()'s text) with @main's parameters `params` (by
// position) marked donated, as set_donated would have printed them.
std::string with_donated_params(const std::string& module, const std::vector<size_t>& params);

}  // namespace torch_tpu::hlo
