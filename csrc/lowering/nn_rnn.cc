// Recurrent cells: the fused LSTM and GRU cell ops and their backward ops.
// PyTorch's nn.LSTM / nn.GRU / LSTMCell / GRUCell on an accelerator (CUDA,
// XPU, PrivateUse1) compute a step's gate pre-activations with two matmuls
// and hand them to `_thnn_fused_lstm_cell` / `_thnn_fused_gru_cell`; autograd
// calls the matching backward ops with the cell's `workspace`. The workspace
// is ours to lay out (the forward and backward here are its only readers);
// it follows CUDA's kernels so that its size is what PyTorch's meta functions
// expect: LSTM [B, 4H] = the activated gates (i, f, g, o); GRU [B, 5H] = the
// gates (r, z, n), the previous hidden state and the hidden-side candidate
// pre-activation (hn + b_hn). Computed in f32 for 16-bit inputs (CUDA's
// accumulation type), rounded once on the way out. Registered from
// register_nn (nn.cc).
#include "helpers.h"

namespace torch_tpu::lowering {

namespace {

// Column block k (width h) of a [B, n*h] matrix.
Value block(Builder& b, Value x, int64_t k, int64_t h) {
  return b.slice(x, {0, k * h}, {x.dim(0), (k + 1) * h}, {1, 1});
}

// Block k of a bias of n*h values, broadcast over the batch; none when absent.
Value bias_block(Context& c, const Arg& bias, int64_t k, int64_t h, Value like, ElementType t) {
  if (bias.none()) return Value{};
  Value v = c.b.slice(c.b.convert(bias.tensor, t), {k * h}, {(k + 1) * h}, {1});
  return c.b.broadcast_in_dim(v, like.shape(), {1});
}

Value plus(Builder& b, Value x, Value y) { return y.valid() ? b.add(x, y) : x; }
Value one_minus(Builder& b, Value x) { return b.sub(splat_like(b, 1, x), x); }
// d sigmoid / d x at y = sigmoid(x), and d tanh / d x at y = tanh(x).
Value dsigmoid(Builder& b, Value y) { return b.mul(one_minus(b, y), y); }
Value dtanh(Builder& b, Value y) { return one_minus(b, b.mul(y, y)); }

// (input_gates [B, 4H], hidden_gates [B, 4H], cx [B, H], input_bias?, hidden_bias?)
// -> (hy, cy, workspace).
Values lstm_cell(Context& c, const Args& a) {
  Builder& b = c.b;
  ElementType t = accumulation_type(a[0].tensor.dtype());
  Value ig = b.convert(a[0].tensor, t), hg = b.convert(a[1].tensor, t), cx = b.convert(a[2].tensor, t);
  int64_t h = cx.dim(1);
  Values gates;
  for (int64_t k = 0; k < 4; ++k) {
    Value pre = b.add(block(b, ig, k, h), block(b, hg, k, h));
    pre = plus(b, pre, bias_block(c, a[3], k, h, cx, t));
    pre = plus(b, pre, bias_block(c, a[4], k, h, cx, t));
    gates.push_back(k == 2 ? b.tanh(pre) : b.logistic(pre));
  }
  Value cy = b.add(b.mul(gates[1], cx), b.mul(gates[0], gates[2]));
  Value hy = b.mul(gates[3], b.tanh(cy));
  return {b.convert(hy, c.out(0).dtype), b.convert(cy, c.out(1).dtype),
          b.convert(b.concatenate(gates, 1), c.out(2).dtype)};
}

// (grad_hy?, grad_cy?, cx, cy, workspace, has_bias) -> (grad_gates, grad_cx, grad_bias?).
Values lstm_cell_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  ElementType t = accumulation_type(a[2].tensor.dtype());
  Value cx = b.convert(a[2].tensor, t), cy = b.convert(a[3].tensor, t);
  Value ws = b.convert(a[4].tensor, t);
  int64_t h = cx.dim(1);
  Value zero = splat_like(b, 0, cx);
  Value ghy = a[0].none() ? zero : b.convert(a[0].tensor, t);
  Value gcy = a[1].none() ? zero : b.convert(a[1].tensor, t);
  Value i = block(b, ws, 0, h), f = block(b, ws, 1, h), g = block(b, ws, 2, h), o = block(b, ws, 3, h);
  Value tcy = b.tanh(cy);
  Value go = b.mul(b.mul(ghy, tcy), dsigmoid(b, o));
  Value gc = b.add(b.mul(b.mul(ghy, o), dtanh(b, tcy)), gcy);
  Value gi = b.mul(b.mul(gc, g), dsigmoid(b, i));
  Value gf = b.mul(b.mul(gc, cx), dsigmoid(b, f));
  Value gg = b.mul(b.mul(gc, i), dtanh(b, g));
  Value grad_gates = b.concatenate({gi, gf, gg, go}, 1);
  Values out{b.convert(grad_gates, c.out(0).dtype), b.convert(b.mul(gc, f), c.out(1).dtype)};
  if (a[5].b) out.push_back(b.convert(reduce_sum(b, grad_gates, {0}), c.out(2).dtype));
  return out;
}

// (input_gates [B, 3H], hidden_gates [B, 3H], hx [B, H], input_bias?, hidden_bias?)
// -> (hy, workspace).
Values gru_cell(Context& c, const Args& a) {
  Builder& b = c.b;
  ElementType t = accumulation_type(a[0].tensor.dtype());
  Value ig = b.convert(a[0].tensor, t), hg = b.convert(a[1].tensor, t), hx = b.convert(a[2].tensor, t);
  int64_t h = hx.dim(1);
  auto input = [&](int64_t k) { return plus(b, block(b, ig, k, h), bias_block(c, a[3], k, h, hx, t)); };
  auto hidden = [&](int64_t k) { return plus(b, block(b, hg, k, h), bias_block(c, a[4], k, h, hx, t)); };
  Value r = b.logistic(b.add(input(0), hidden(0)));
  Value z = b.logistic(b.add(input(1), hidden(1)));
  Value hn = hidden(2);
  Value n = b.tanh(b.add(input(2), b.mul(r, hn)));
  Value hy = b.add(n, b.mul(z, b.sub(hx, n)));
  return {b.convert(hy, c.out(0).dtype), b.convert(b.concatenate({r, z, n, hx, hn}, 1), c.out(1).dtype)};
}

// (grad_hy, workspace, has_bias) -> (grad_input_gates, grad_hidden_gates,
// grad_hx, grad_input_bias?, grad_hidden_bias?).
Values gru_cell_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  ElementType t = accumulation_type(a[0].tensor.dtype());
  Value ghy = b.convert(a[0].tensor, t), ws = b.convert(a[1].tensor, t);
  int64_t h = ghy.dim(1);
  Value r = block(b, ws, 0, h), z = block(b, ws, 1, h), n = block(b, ws, 2, h);
  Value hx = block(b, ws, 3, h), hn = block(b, ws, 4, h);
  Value gn = b.mul(b.mul(ghy, one_minus(b, z)), dtanh(b, n));
  Value gz = b.mul(b.mul(ghy, b.sub(hx, n)), dsigmoid(b, z));
  Value gr = b.mul(b.mul(gn, hn), dsigmoid(b, r));
  Value gi = b.concatenate({gr, gz, gn}, 1);
  Value gh = b.concatenate({gr, gz, b.mul(gn, r)}, 1);
  Values out{b.convert(gi, c.out(0).dtype), b.convert(gh, c.out(1).dtype),
             b.convert(b.mul(ghy, z), c.out(2).dtype)};
  if (a[2].b) {
    out.push_back(b.convert(reduce_sum(b, gi, {0}), c.out(3).dtype));
    out.push_back(b.convert(reduce_sum(b, gh, {0}), c.out(4).dtype));
  }
  return out;
}

}  // namespace

void register_nn_rnn(Registry& r) {
  r.add("aten::_thnn_fused_lstm_cell", lstm_cell);
  r.add("aten::_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
  r.add("aten::_thnn_fused_gru_cell", gru_cell);
  r.add("aten::_thnn_fused_gru_cell_backward", gru_cell_backward);
}

}  // namespace torch_tpu::lowering
