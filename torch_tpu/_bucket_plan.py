"""Which graphs torch.compile(backend="tpu") can bucket exactly, and the
rewrite that makes one graph serve every size up to its bucket
(dynamic_shapes.py runs the result): the ops known to be exact over padded,
masked dimensions, the checks on the rest, sizes used as values, and the
two forms of a varying dimension merged with one before it (`_Merges`).
"""
import operator

import sympy
import torch

# ---- which graphs are bucketed -------------------------------------------------

aten = torch.ops.aten

# Ops that are exact over padded, masked dimensions whatever their dims:
# elementwise math, layout, matmuls (XLA pads a varying contraction with
# zeros), and ops whose reductions XLA masks with their identity.
_SAFE = {
    "abs", "add", "addcmul", "addcdiv", "addmm", "alias", "all", "amax", "amin", "any", "arange",
    "baddbmm", "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "bmm", "clamp",
    "clamp_max", "clamp_min", "clone", "cos", "detach", "div", "embedding",
    "embedding_dense_backward", "empty", "empty_like", "eq", "erf", "exp", "expand", "fill",
    "full", "full_like", "ge", "gelu", "gelu_backward", "gt", "le", "lift_fresh_copy", "log",
    "log1p", "logical_and", "logical_not", "logical_or", "logsumexp", "lt", "masked_fill",
    "maximum", "minimum", "mm", "mul", "native_dropout", "native_dropout_backward", "ne", "neg",
    "new_empty", "new_full", "new_ones", "new_zeros", "nll_loss_backward", "nll_loss_forward",
    "ones", "ones_like", "permute", "pow", "reciprocal", "relu", "rsqrt", "scalar_tensor",
    "sigmoid", "sigmoid_backward", "silu", "silu_backward", "sin", "sqrt", "squeeze", "sub",
    "sum", "t", "tanh", "tanh_backward", "threshold_backward", "transpose", "tril", "triu",
    "unsqueeze", "view", "_unsafe_view", "reshape", "where", "zeros", "zeros_like", "_to_copy",
    "_softmax", "_softmax_backward_data", "_log_softmax", "_log_softmax_backward_data",
    "_safe_softmax", "isneginf", "isinf", "isnan", "logical_xor", "sign", "expm1", "square",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
    "native_layer_norm", "native_layer_norm_backward", "split_with_sizes", "split",
    "slice", "select", "mean", "copy", "cat", "stack", "convert_element_type", "index",
    "true_divide", "cumsum", "gather",
}
# Scalar overloads whose Scalar operand may be a size: rewritten to their
# Tensor overload with the size as a 0-d tensor computed per call.
_SCALAR_TO_TENSOR = {
    aten.add.Scalar: aten.add.Tensor, aten.sub.Scalar: aten.sub.Tensor,
    aten.mul.Scalar: aten.mul.Tensor, aten.div.Scalar: aten.div.Tensor,
}
# Ops that reduce or contract: XLA masks them only where an operand carries a
# padded dimension from the inputs (a bounded dimension).
_REDUCING = {
    "sum", "mean", "amax", "amin", "all", "any", "logsumexp", "_softmax", "_log_softmax",
    "_safe_softmax", "_softmax_backward_data", "_log_softmax_backward_data", "mm", "bmm",
    "addmm", "baddbmm", "nll_loss_forward", "nll_loss_backward", "native_layer_norm_backward",
    "embedding_dense_backward", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
}
_SYM_OPS = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.neg,
            operator.mod, torch.sym_max, torch.sym_min, operator.getitem}


def _finite_int(v):
    try:
        return int(v) if v.is_number and bool(v.is_finite) else None
    except (TypeError, AttributeError, ValueError):
        return None


def _val(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else n


def symbolic(v):
    return isinstance(v, torch.SymInt) and not v.node.expr.is_number


def _expr(v):
    return v.node.expr if isinstance(v, torch.SymInt) else sympy.Integer(int(v))


def _shape_exprs(t):
    return [_expr(s) for s in t.shape]


class Refused(Exception):
    """Why a graph cannot be bucketed exactly (it then runs specialized)."""


def _check_dims(node, t, dims):
    if t is None:
        return
    for d in dims:
        if symbolic(t.shape[d % max(t.dim(), 1)]):
            raise Refused(f"{node.target} along a varying dimension")


def _prefixes(shape):
    out, p = [], sympy.Integer(1)
    for e in shape:
        out.append(p)
        p = p * e
    return out


def _same(a, b):
    return sympy.expand(a - b) == 0


def _reshape_keeps_offsets(a, o):
    """Whether every varying dimension of `a` starts a dimension of `o` at the
    same linear offset (and the other way round). XLA moves the valid elements
    of a varying dimension together when a reshape merges it with a dimension
    before it, and a later split cannot put them back: [b, n, d] -> [b*n, d]
    is refused for b > 1, [1, n, d] -> [n, d] and [4, n, 8] -> [2, 2, n, 8]
    are fine."""
    pa, po = _prefixes(a), _prefixes(o)
    for x, y, px, py in ((a, o, pa, po), (o, a, po, pa)):
        for i, e in enumerate(x):
            if e.free_symbols and not any(
                    _same(px[i], py[j]) and y[j].free_symbols for j in range(len(y))):
                return False
    return True


def _leading(shape):
    """Whether no varying dim comes after a dim other than 1 ([1, n], [n, 4]:
    flattening keeps the valid elements where they were; [b, n] with b > 1
    or varying does not)."""
    seen = False  # a dim other than 1 so far
    for e in shape:
        if e.free_symbols and seen:
            return False
        seen = seen or e != 1
    return True


# Ops that pass an index tensor's values through unchanged (a view, a copy,
# a full-range slice): what _iota_of looks through.
_SAME_VALUES = {"unsqueeze", "view", "_unsafe_view", "reshape", "expand", "alias", "clone",
                "squeeze", "slice"}


def _to_end(end, size):
    """Whether a slice's `end` reaches the end of a dimension of `size`."""
    return end is None or (isinstance(end, int) and end >= 2 ** 62) or (
        isinstance(end, torch.fx.Node) and _same(_expr(_val(end)), _expr(size)))


def _every_length_has(index, size):
    """Whether position `index` (a Python int) is valid at every value the
    varying `size` may take (Dynamo's value range of its expression): a
    select there reads a true element whatever the length."""
    if not isinstance(index, int) or index < 0:
        return False  # a position counted from the end moves with the length
    lower = 1
    shape_env = size.node.shape_env if isinstance(size, torch.SymInt) else None
    if shape_env is not None:
        lower = _finite_int(shape_env.bound_sympy(_expr(size)).lower) or 1
    return index < lower


def _iota_of(node, size):
    """Whether `node` holds arange(size) (possibly viewed, expanded or
    sliced in full): positions 0..n-1 of a padded tensor whose dimension
    varies with `size`, padded positions reading only padding."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function":
        target = node.target
        name = getattr(target, "_schema", None) and target._schema.name.split("::")[-1]
        if name == "arange":
            args = list(node.args)
            end = args[0] if len(args) == 1 else args[1] if len(args) in (2, 3) else None
            start = 0 if len(args) == 1 else args[0]
            step = args[2] if len(args) == 3 else 1
            return (start == 0 and step == 1 and end is not None
                    and _same(_expr(_val(end)) if isinstance(end, torch.fx.Node) else _expr(end),
                              _expr(size)))
        if name in ("add", "sub") and len(node.args) == 2 and node.args[1] == 0 and \
                node.kwargs.get("alpha", 1) == 1:
            node = node.args[0]  # an offset of 0 (transformers adds its cache offset)
            continue
        if name not in _SAME_VALUES:
            return False
        if name == "slice":
            a = list(node.args) + [0, None, None, 1][len(node.args) - 1:]
            x, dim, start, end, step = a[0], a[1], a[2], a[3], a[4]
            if not (start in (None, 0) and step == 1 and _to_end(end, _val(x).shape[dim])):
                return False
        node = node.args[0]
    return False


# Ops that work along some dims and treat every position of the others on its
# own: exact over padded dims they do not work along. name -> (position of
# the dim argument, its default; None: every dim).
_ALONG = {
    "linalg_vector_norm": (2, None), "var": (1, None), "std": (1, None), "max": (1, None),
    "min": (1, None), "argmax": (1, None), "argmin": (1, None), "sort": (1, -1),
    "topk": (2, -1),
}


def _check_node(node):
    target = node.target
    if target in _SYM_OPS or (getattr(target, "__module__", "") or "").startswith("torch.fx.experimental"):
        return
    if target is operator.getitem:
        return
    if not isinstance(target, torch._ops.OpOverload):
        raise Refused(f"{target} is not an ATen op")
    name = target._schema.name.split("::")[-1]
    if name.endswith("_"):
        name = name[:-1]
    if name not in _SAFE and name not in _ALONG:
        raise Refused(f"{target} is not known to be exact over padded dimensions")
    args = node.args
    x = _val(args[0]) if args else None
    if name in ("view", "_unsafe_view", "reshape"):
        out = _val(node)
        if not _reshape_keeps_offsets(_shape_exprs(x), _shape_exprs(out)):
            raise Refused(f"a reshape merges or splits a varying dimension with one before it "
                          f"({list(x.shape)} -> {list(out.shape)}); only a leading varying "
                          f"dimension can be merged (e.g. batch 1, or the length first)")
    elif name == "embedding":
        idx = _val(args[1])
        if not _leading(_shape_exprs(idx)):
            raise Refused(f"embedding indices {list(idx.shape)} vary in a dimension after "
                          f"another (only a leading varying dimension is exact)")
    elif name == "slice":
        dim = args[1] if len(args) > 1 else 0
        start = args[2] if len(args) > 2 else None
        end = args[3] if len(args) > 3 else None
        step = args[4] if len(args) > 4 else 1
        size = x.shape[dim]
        if symbolic(size) and not (start in (None, 0) and step == 1 and _to_end(end, size)):
            raise Refused(f"a slice along a varying dimension ({node.format_node()})")
    elif name in _ALONG:  # exact when the dims it works along do not vary
        where, default = _ALONG[name]
        if name == "sort" and "stable" in target._schema.overload_name:
            where = 2
        dim = args[where] if len(args) > where else node.kwargs.get("dim", default)
        if not (dim is None or isinstance(dim, int) or (isinstance(dim, (list, tuple)) and all(
                isinstance(d, int) for d in dim))):
            raise Refused(f"{target} is not known to be exact over padded dimensions")
        dims = range(x.dim()) if dim is None else dim if isinstance(dim, (list, tuple)) else [dim]
        _check_dims(node, x, dims if len(dims) else range(x.dim()))
    elif name == "index":
        # A gather along a varying dimension is exact when its index there is
        # arange of that dimension's size (a mask built by broadcasting, as
        # transformers' attention masks are): valid positions read valid
        # elements. Other index values could point past the true length (or
        # wrap from the end of the padded one), so they are refused.
        for d, idx in enumerate(args[1]):
            if idx is not None and symbolic(x.shape[d]) and not _iota_of(idx, x.shape[d]):
                raise Refused(f"an index along a varying dimension that is not arange of its "
                              f"size ({node.format_node()})")
    elif name == "gather":  # out[..., j, ...] = x[..., idx[..., j, ...], ...] along dim
        dim = args[1] % max(x.dim(), 1)
        if symbolic(x.shape[dim]) and not _iota_of(args[2], x.shape[dim]):
            raise Refused(f"a gather along a varying dimension whose index is not arange of "
                          f"its size ({node.format_node()})")
    elif name == "select":
        _check_dims(node, x, [args[1]])
    elif name in ("cat", "stack"):
        dim = args[1] if len(args) > 1 else node.kwargs.get("dim", 0)
        first = _val(args[0][0])
        if name == "cat" or dim < first.dim():
            _check_dims(node, first, [dim])
    elif name in ("split", "split_with_sizes"):
        _check_dims(node, x, [args[2] if len(args) > 2 else 0])
    elif name in ("native_layer_norm", "native_layer_norm_backward"):
        t = _val(args[1] if name == "native_layer_norm_backward" else args[0])
        k = len(args[2] if name == "native_layer_norm_backward" else args[1])
        _check_dims(node, t, range(t.dim() - k, t.dim()))
    elif name == "copy" and target._schema.is_mutable:
        raise Refused("the graph writes into an input (copy_)")


def _size_arg_ok(schema_arg):
    t = str(schema_arg.type)  # a SymInt prints as int ("Optional[int]" for SymInt?)
    return "SymInt" in t or t.startswith("int") or t == "Optional[int]"


# ---- varying dimensions merged with one before them ----------------------------

# Ops that treat each position of a merged dimension on its own (elementwise):
# exact on the static padded form, whatever the padding holds.
_ROWWISE = {
    "abs", "add", "addcmul", "addcdiv", "alias", "clamp", "clamp_max", "clamp_min", "clone",
    "convert_element_type", "cos", "detach", "div", "eq", "erf", "exp", "expm1", "ge", "gelu",
    "gt", "le", "log", "log1p", "lt", "masked_fill", "maximum", "minimum", "mul", "ne", "neg",
    "pow", "reciprocal", "relu", "rsqrt", "sigmoid", "sign", "silu", "sin", "sqrt", "square",
    "sub", "tanh", "true_divide", "where", "_to_copy",
}


def _groups(fine, coarse):
    """Which consecutive dims of `fine` make up each dim of `coarse` (their
    product), or None when `coarse` is not `fine` with runs of dims merged."""
    groups, i = [], 0
    for c in coarse:
        run, p = [], sympy.Integer(1)
        while i < len(fine) and not (run and _same(p, c)):
            run.append(i)
            p = p * fine[i]
            i += 1
        if not run or not _same(p, c):
            return None
        groups.append(run)
    while groups and i < len(fine) and fine[i] == 1:
        groups[-1].append(i)
        i += 1
    return groups if i == len(fine) else None


def _splits_varying(shape, out):
    """Whether a reshape of `shape` to `out` splits a varying dimension into
    several dimensions other than 1."""
    groups = _groups(out, shape)
    return groups is not None and any(
        shape[i].free_symbols and sum(1 for j in run if out[j] != 1) > 1
        for i, run in enumerate(groups))


def _varies(n):
    v = _val(n)
    return isinstance(v, torch.Tensor) and any(e.free_symbols for e in _shape_exprs(v))


class _Merges:
    """A reshape that merges a varying dimension with one before it ([b, n, d]
    -> [b*n, d]: every linear layer at batch > 1) would let XLA pack the
    valid elements at the front (row (i, j) at i*n + j), which a later split
    cannot undo. Two forms of such a tensor are kept apart:

    - static padded (`fine`): made static before the merge (`_static_dim`,
      row (i, j) at i*B + j); matmuls over its rows, elementwise ops and
      reductions over other dims keep it so, and the reshape that splits the
      dimensions again gives them their true lengths back (`_bounded_dim`);
    - packed (`compact`): bounded again and merged by XLA, which masks the
      padded rows; what reads across positions (a sum over them, a weight's
      gradient, a loss), a result and a tensor saved for the backward take
      it. A packed tensor split into [b, n] (the backward's gradients)
      becomes static padded again by a gather (`expand`)."""

    VIEWS = ("view", "_unsafe_view", "reshape")

    def __init__(self, graph, size_input, size_node, bounded):
        self.graph, self.size_input, self.bounded = graph, size_input, bounded
        self.size_node = size_node  # a size symbol -> a graph value of its padded size
        self.fine = {}  # node -> its shape with every varying dimension on its own
        self.parts = {}  # node with several results -> each result's fine shape
        self.compacted = {}  # node -> its compacted form (compact)

    def _call(self, target, args, like):
        n = self.graph.call_function(target, args)
        n.meta["val"] = _val(like)
        return n

    def step(self, node, name):
        """Handles `node` when a merge concerns it (True), else False."""
        if name in self.VIEWS:
            return self._view(node)
        if node.target is operator.getitem and node.args[0] in self.parts:
            self.fine[node] = self.parts[node.args[0]][node.args[1]]
            return True
        merged = [i for i in node.all_input_nodes if i in self.fine]
        if not merged:
            if name in ("embedding", "embedding_dense_backward"):
                return self._embedding(node, name)
            if name in ("slice", "slice_backward", "select", "select_backward",
                        "constant_pad_nd"):
                return self._edge(node, name)
            return False
        if not self._row_wise(node, name, merged):
            self._compact_args(node)  # the op reads across merged positions: XLA masks them
            return False
        return True

    def _row_wise(self, node, name, merged):
        """Records `node` as static padded when it treats each merged
        position on its own (False when it does not)."""
        if any(isinstance(a, torch.fx.Node) and symbolic(_val(a)) for a in node.args):
            return False  # a size as a value: the general rewrite handles it
        x = node.args[0]
        if name in ("mm", "addmm"):
            x, w = node.args[-2], node.args[-1]
            bias = node.args[0] if name == "addmm" else None
            if (x not in self.fine or set(self._rows(x)) != {0} or w in self.fine or _varies(w)
                    or (bias is not None and (bias in self.fine or _varies(bias)))):
                return False
            self._keep(node, self._rows(x))
            return True
        if name in _ROWWISE and isinstance(_val(node), torch.Tensor):
            rank = _val(node).dim()
            rows = self._rows(merged[0])
            if any((_val(i).dim() != rank or self._rows(i) != rows) if i in self.fine
                   else _varies(i) for i in node.all_input_nodes):
                return False
            self._keep(node, rows)
            return True
        if x not in self.fine:
            return False
        rows, rank = self._rows(x), _val(x).dim()
        if name in ("sum", "mean", "amax", "amin", "_softmax", "_log_softmax") and \
                len(node.args) > 1:
            dims = node.args[1] if isinstance(node.args[1], (list, tuple)) else [node.args[1]]
            dims = {d % rank for d in dims}
            keep = name.startswith("_") or (node.args[2] if len(node.args) > 2
                                            else node.kwargs.get("keepdim", False))
            if dims and not dims & set(rows):
                self._keep(node, {k - (0 if keep else sum(d < k for d in dims)): v
                                  for k, v in rows.items()})
                return True
        if name == "native_layer_norm" and not set(range(rank - len(node.args[1]), rank)) & set(rows):
            self.parts[node] = [self._fine_of(_val(part).shape, rows) for part in _val(node)]
            return True
        return False

    def _compact_args(self, node):
        with self.graph.inserting_before(node):
            packed = {i: self.compact(i) for i in node.all_input_nodes if i in self.fine}
        node.args = torch.fx.node.map_arg(node.args, lambda a: packed.get(a, a))
        node.kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: packed.get(a, a))

    def compact(self, n):
        """The static padded `n` in XLA's form: its varying dimensions bounded
        again, then merged by XLA, which packs the valid positions at the
        front in order (row (i, j) at i*n + j). A reduction or contraction
        over them, a result and a tensor saved for the backward take this
        form; `expand` is its inverse."""
        if n in self.compacted:
            return self.compacted[n]
        fine, coarse = self.fine[n], _shape_exprs(_val(n))
        rows = self._rows(n)
        if len(rows) != 1:
            raise Refused(f"a tensor holds merged varying positions in several dimensions "
                          f"({list(_val(n).shape)})")
        v = self.graph.call_function(aten.view.default, (n, [self.size_node(e) for e in fine]))
        for d, e in enumerate(fine):
            if e.free_symbols:
                v = self.graph.call_function(torch.ops.tpu._bounded_dim.default,
                                             (v, self.size_input(e), d))
        sizes = [-1 if k in rows else self.size_node(e) for k, e in enumerate(coarse)]
        c = self._call(aten.view.default, (v, sizes), n)
        self.bounded.add(c)
        self.compacted[n] = c
        return c

    def expand(self, x, fine):
        """XLA's packed form of a merged dimension of `x` (a saved tensor, a
        gradient) in the static padded layout of `fine`, its refinement: the
        padded position (i, j) of [b, n] reads packed row i*n + j (each
        index times the true sizes after it)."""
        coarse = _shape_exprs(_val(x))
        groups = _groups(fine, coarse)
        merged = [k for k, g in enumerate(groups) if any(fine[j].free_symbols for j in g)]
        if len(merged) != 1:
            raise Refused(f"a reshape splits packed varying positions in several dimensions "
                          f"({list(_val(x).shape)} -> {fine})")
        k, g = merged[0], groups[merged[0]]
        graph, device = self.graph, _val(x).device
        pos, stride = None, []  # stride: the true sizes after the current dim
        for t in reversed(range(len(g))):
            e = fine[g[t]]
            idx = graph.call_function(aten.arange.default, (self.size_node(e),),
                                      {"dtype": torch.int64, "device": device})
            for _ in range(len(g) - 1 - t):
                idx = graph.call_function(aten.unsqueeze.default, (idx, -1))
            for f in stride:
                idx = graph.call_function(aten.mul.Tensor if isinstance(f, torch.fx.Node)
                                          else aten.mul.Scalar, (idx, f))
            pos = idx if pos is None else graph.call_function(aten.add.Tensor, (idx, pos))
            stride.append(self.size_input(e) if e.free_symbols else int(e))
        pos = graph.call_function(aten.view.default, (pos, [-1]))
        s = graph.call_function(torch.ops.tpu._static_dim.default, (x, k))
        a = self._call(aten.index_select.default, (s, k, pos), x)
        self.fine[a] = fine
        return a

    def _rows(self, n):
        """{dim of n: the fine dims merged into it} for its dims that hold
        merged varying positions."""
        fine = self.fine[n]
        groups = _groups(fine, _shape_exprs(_val(n)))
        if groups is None:
            raise Refused(f"a merged tensor changed shape unexpectedly ({list(_val(n).shape)})")
        return {k: [fine[j] for j in g] for k, g in enumerate(groups)
                if any(fine[j].free_symbols for j in g)}

    @staticmethod
    def _fine_of(shape, rows):
        out = []
        for k, e in enumerate(shape):
            out += rows[k] if k in rows else [_expr(e)]
        return out

    def _keep(self, node, rows):
        """`node` holds merged positions in its dims `rows`."""
        self.fine[node] = self._fine_of(_val(node).shape, rows)

    def _view(self, node):
        x = node.args[0]
        out = _shape_exprs(_val(node))
        fine = self.fine.get(x)
        if fine is None:
            fine = _shape_exprs(_val(x))
            if not any(e.free_symbols for e in fine):
                return False
            if _reshape_keeps_offsets(fine, out):
                if not _splits_varying(fine, out):
                    return False  # an ordinary reshape of a bounded tensor
                # [b*h, n, d] -> [b, h, n, d] with b varying: XLA's dynamic
                # padder takes the first part as varying but the printed
                # types do not, and it fails a check on a later slice; the
                # static padded form splits alike (b leads, so valid rows
                # are in front either way) and the parts get their lengths.
                self._static_first_arg(node, [d for d, e in enumerate(fine) if e.free_symbols])
                self.rebound(node, out)
                return True
            if _groups(fine, out) is None:
                if _groups(out, fine) is None:
                    raise Refused(f"a reshape merges and splits a varying dimension at once "
                                  f"({list(_val(x).shape)} -> {list(_val(node).shape)})")
                with self.graph.inserting_before(node):  # splits XLA's packed form
                    node.args = (self.expand(x, out),) + tuple(node.args[1:])
                self.rebound(node, out)
                return True
            self._static_first_arg(node, [d for d, e in enumerate(fine) if e.free_symbols])
            self.fine[node] = fine
            return True
        if _reshape_keeps_offsets(fine, out):  # splits the merged dimensions again
            self.rebound(node, out)
            return True
        if _groups(fine, out) is None:
            raise Refused(f"a reshape splits a merged dimension other than back into its parts "
                          f"({list(_val(x).shape)} -> {list(_val(node).shape)})")
        self.fine[node] = fine
        return True

    def _static_first_arg(self, node, dims):
        """Makes `node` take its first argument with `dims` static (their
        padded size: the static padded form)."""
        x = node.args[0]
        with self.graph.inserting_before(node):
            s = x
            for d in dims:
                s = self._call(torch.ops.tpu._static_dim.default, (s, d), x)
        node.args = (s,) + tuple(node.args[1:])

    def _static(self, x, fill):
        """x with each varying dimension static (its padded size) and the
        positions past each true length set to `fill`."""
        shape = _shape_exprs(_val(x))
        for d, e in enumerate(shape):
            if not e.free_symbols:
                continue
            x = self._call(torch.ops.tpu._static_dim.default, (x, d), x)
            n = self.graph.call_function(aten.sym_size.int, (x, d))
            pos = self.graph.call_function(aten.arange.default, (n,),
                                           {"dtype": torch.int64, "device": _val(x).device})
            past = self.graph.call_function(aten.ge.Tensor, (pos, self.size_input(e)))
            for _ in range(len(shape) - d - 1):
                past = self.graph.call_function(aten.unsqueeze.default, (past, -1))
            x = self._call(aten.masked_fill.Scalar, (x, past, fill), x)
        return x

    def _edge(self, node, name):
        """Ops at the ends of a varying dimension: a slice dropping its first
        positions (`labels[..., 1:]`), its backward (the gradient placed
        after them), a select of a position every length has (BERT's pooler
        reads `hidden[:, 0]`), its backward, and a constant pad
        (`F.pad(labels, (0, 1), value=-100)`). They
        run on the static padded tensor (the padding lands past the true
        length, where nothing reads), a right pad writes its value at the
        true end, and the result gets its true length back."""
        x, args = node.args[0], list(node.args)
        xv, out = _val(x), _val(node)
        dims = [d for d in range(xv.dim()) if symbolic(xv.shape[d])]
        if name == "select_backward":  # (grad, input_sizes, dim, index)
            dim = args[2] % out.dim()
            if not (symbolic(out.shape[dim]) and _every_length_has(args[3], out.shape[dim])):
                return False  # refused by _check_node
        elif not dims:
            return False
        elif name == "select":  # (x, dim, index)
            dim = args[1] % xv.dim()
            if dim not in dims or not _every_length_has(args[2], xv.shape[dim]):
                return False
        elif name == "slice":
            dim, start = args[1] % xv.dim(), (args[2] if len(args) > 2 else 0) or 0
            end, step = args[3] if len(args) > 3 else None, args[4] if len(args) > 4 else 1
            full = _to_end(end, xv.shape[dim])
            if dim not in dims or not (isinstance(start, int) and start > 0 and full and step == 1):
                return False
        elif name == "slice_backward":  # (grad, input_sizes, dim, start, end, step)
            dim, start, end, step = args[2] % xv.dim(), args[3], args[4], args[5]
            full = end is not None and _to_end(end, out.shape[dim])
            # Along a static dim (the halves of a rotary embedding's head
            # dim) the gradient lands at the same places at every length;
            # along the varying one only a slice to its end is exact.
            if dim in dims and not (isinstance(start, int) and start >= 0 and full and step == 1):
                return False  # refused by _check_node
        else:  # constant_pad_nd(x, [left, right] from the last dim on, value)
            pads = list(args[1])
            if any(not isinstance(p, int) or p < 0 for p in pads):
                return False
            right = {xv.dim() - 1 - i // 2: pads[i] for i in range(1, len(pads), 2)}
            left = {xv.dim() - 1 - i // 2: pads[i] for i in range(0, len(pads), 2)}
            if not any(left.get(d, 0) or right.get(d, 0) for d in dims):
                return False
        self._static_first_arg(node, dims)
        if name == "constant_pad_nd":
            value = args[2] if len(args) > 2 else node.kwargs.get("value", 0)
            created, cur = set(), node
            with self.graph.inserting_before(node.next):
                for d in dims:
                    if not right.get(d, 0):
                        continue
                    end = self.size_input(_expr(xv.shape[d]) + left.get(d, 0))
                    n = self.graph.call_function(aten.sym_size.int, (node, d))
                    pos = self.graph.call_function(aten.arange.default, (n,), {
                        "dtype": torch.int64, "device": xv.device})
                    past = self.graph.call_function(aten.ge.Tensor, (pos, end))
                    created |= {n, pos, past}
                    for _ in range(xv.dim() - d - 1):
                        past = self.graph.call_function(aten.unsqueeze.default, (past, -1))
                        created.add(past)
                    cur = self._call(aten.masked_fill.Scalar, (cur, past, value), node)
                    created.add(cur)
            if cur is not node:
                node.replace_all_uses_with(cur, delete_user_cb=lambda user: user not in created)
            node = cur
        self.rebound(node, _shape_exprs(out))
        return True

    def _embedding(self, node, name):
        """An embedding flattens its indices: with a varying dimension after
        another ([b, n] at batch > 1) it runs on the static padded indices
        (padding set to index 0) and its rows get their true lengths back;
        its backward adds the padded positions' gradient as zeros."""
        idx = node.args[1]
        shape = _shape_exprs(_val(idx))
        if _leading(shape):
            return False
        if name == "embedding_dense_backward" and len(node.args) > 4 and node.args[4]:
            raise Refused("embedding backward with scale_grad_by_freq counts padded indices")
        with self.graph.inserting_before(node):
            if name == "embedding":
                node.args = (node.args[0], self._static(idx, 0)) + tuple(node.args[2:])
            else:
                node.args = (self._static(node.args[0], 0.0), self._static(idx, 0)) + \
                    tuple(node.args[2:])
        if name == "embedding":
            self.rebound(node, shape)
        return True

    def rebound(self, node, shape):
        """Gives the static padded result of `node` its true lengths back:
        each dimension varying in `shape` (a prefix of its dims)."""
        added, cur = set(), node
        for d, e in enumerate(shape):
            if e.free_symbols:
                with self.graph.inserting_after(cur):
                    cur = self._call(torch.ops.tpu._bounded_dim.default,
                                     (cur, self.size_input(e), d), node)
                added.add(cur)
        node.replace_all_uses_with(cur, delete_user_cb=lambda user: user not in added)
        self.bounded.add(cur)

    def compact_outputs(self, output):
        """Results leave in XLA's packed form: their valid part is then the
        front of the padded result, as any bounded result's is."""
        self._compact_args(output)


class Plan:
    """How one AOTAutograd graph runs bucketed: which placeholder dims vary,
    the sizes it needs as runtime values, and its rewritten graph."""

    def __init__(self, gm):
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        # Bucketed symbols: the inputs' sizes. A symbol only in SymInt inputs
        # (an input's stride, e.g. of a slice) is ignored when nothing uses it.
        self.symbols = set()
        for p in self.placeholders:
            v = _val(p)
            if isinstance(v, torch.Tensor):
                for s in v.shape:
                    if symbolic(s):
                        self.symbols |= _expr(s).free_symbols
        # Placeholder indices passed as 0: unused, or only handed on as an
        # output (a forward returns an input's stride for its backward), whose
        # value is then computed from the call's own values.
        self.unused = set()
        for i, p in enumerate(self.placeholders):
            v = _val(p)
            if symbolic(v) and not _expr(v).free_symbols <= self.symbols:
                if any(u.op != "output" for u in p.users):
                    raise Refused(f"the graph uses {v}, which is no input's size (a stride?)")
                self.unused.add(i)
        # Where each symbol's value comes from: (placeholder, dim or None).
        self.binders = {}
        for i, p in enumerate(self.placeholders):
            v = _val(p)
            if isinstance(v, torch.Tensor):
                for d, s in enumerate(v.shape):
                    e = _expr(s)
                    if isinstance(e, sympy.Symbol):
                        self.binders.setdefault(e, (i, d))
            elif symbolic(v) and isinstance(_expr(v), sympy.Symbol):
                self.binders.setdefault(_expr(v), (i, None))
        missing = self.symbols - set(self.binders)
        if missing:
            raise Refused(f"sizes {sorted(map(str, missing))} are only known through expressions")
        self.shape_env = None
        for p in self.placeholders:
            v = _val(p)
            for s in (v.shape if isinstance(v, torch.Tensor) else [v]):
                if symbolic(s):
                    self.shape_env = s.node.shape_env
                    break
            if self.shape_env is not None:
                break
        self.sizes = []  # sympy expressions passed as 0-d int64 tensors, in order
        self.bounded = []  # (placeholder index, dim, index into sizes)
        for i, p in enumerate(self.placeholders):
            v = _val(p)
            if isinstance(v, torch.Tensor):
                for d, s in enumerate(v.shape):
                    if symbolic(s):
                        self.bounded.append((i, d, self._size(_expr(s))))
        self.gm = self._rewrite(gm)
        out = next(n for n in self.gm.graph.nodes if n.op == "output")
        self.outputs = [_val(o) for o in torch.fx.node.map_arg(out.args[0], lambda n: n)] \
            if isinstance(out.args[0], (list, tuple)) else [_val(out.args[0])]

    def _size(self, e):
        if e not in self.sizes:
            self.sizes.append(e)
        return self.sizes.index(e)

    def bounds(self, symbol):
        """(lower, upper or None) of a symbol from Dynamo's value ranges."""
        lower, upper = 1, None
        if self.shape_env is not None:
            r = self.shape_env.var_to_range.get(symbol)
            if r is not None:
                lower = max(1, _finite_int(r.lower) or 1)
                upper = _finite_int(r.upper)
                if upper is not None and upper >= 2 ** 31:
                    upper = None
        return lower, upper

    def _rewrite(self, gm):
        graph = torch.fx.Graph()
        env = {}
        result = graph.graph_copy(gm.graph, env)
        graph.output(result)
        new_gm = torch.fx.GraphModule(gm, graph)
        nodes = list(graph.nodes)
        last_ph = [n for n in nodes if n.op == "placeholder"][-1]
        extra = {}  # size index -> placeholder

        def size_input(e):
            k = self._size(e)
            if k not in extra:
                with graph.inserting_after(last_ph if not extra else list(extra.values())[-1]):
                    ph = graph.placeholder(f"_tpu_size_{k}")
                extra[k] = ph
            return extra[k]

        bounded = set()  # nodes whose value carries an input's padded dimension
        placeholders = [n for n in nodes if n.op == "placeholder"]

        def size_node(e):  # a size's padded value inside the graph
            if not e.free_symbols:
                return int(e)
            if e not in self.binders:
                raise Refused(f"the size {e} is needed as a value but is no input's size")
            i, d = self.binders[e]
            if d is None:
                return placeholders[i]
            return graph.call_function(aten.sym_size.int, (placeholders[i], d))

        merges = _Merges(graph, size_input, size_node, bounded)
        for node in nodes:
            if node.op == "placeholder":
                v = _val(node)
                if isinstance(v, torch.Tensor) and any(symbolic(d) for d in v.shape):
                    bounded.add(node)
                continue
            if node.op == "output":
                merges.compact_outputs(node)
            if node.op != "call_function":
                continue
            target = node.target
            name = target._schema.name.split("::")[-1] \
                if isinstance(target, torch._ops.OpOverload) else None
            if merges.step(node, name):
                continue
            _check_node(node)
            inputs = node.all_input_nodes
            if any(i in bounded for i in inputs):
                bounded.add(node)
            elif getattr(node.target, "_schema", None) is not None and \
                    node.target._schema.name.split("::")[-1] in _REDUCING and any(
                        isinstance(_val(i), torch.Tensor)
                        and any(symbolic(d) for d in _val(i).shape) for i in inputs):
                raise Refused(f"{node.target} reduces a varying dimension of a tensor made in "
                              f"the graph (e.g. ones(n).sum()), whose padding XLA cannot mask")
            target = node.target
            if not isinstance(target, torch._ops.OpOverload):
                continue
            schema = target._schema
            # Sizes used as values: only a Scalar operand of add/sub/mul/div.
            new_args = list(node.args)
            positional = schema.name == "aten::arange"  # an iota of the padded size
            for k, (a, sa) in enumerate(zip(node.args, schema.arguments)):
                if (isinstance(a, torch.fx.Node) and symbolic(_val(a)) and not _size_arg_ok(sa)
                        and not positional):
                    if target not in _SCALAR_TO_TENSOR:
                        raise Refused(f"a size is used as a value by {target}")
                    new_args[k] = size_input(_expr(_val(a)))
                    node.target = _SCALAR_TO_TENSOR[target]
            node.args = tuple(new_args)
            if target is aten.slice.Tensor:
                # A static tensor sliced to a size (a buffer of positions cut to
                # the length): the padded graph takes the bucket's length of it,
                # so the result gets its true length like an input.
                x, out = _val(node.args[0]), _val(node)
                dim = (node.args[1] if len(node.args) > 1 else 0) % x.dim()
                if symbolic(out.shape[dim]) and not symbolic(x.shape[dim]):
                    merges.rebound(node, [_expr(e) if d == dim else sympy.Integer(1)
                                          for d, e in enumerate(out.shape)])
            if target is aten.embedding_dense_backward.default:
                self._mask_scatter_rows(graph, node, size_input)
            if target in (aten.mean.dim, aten.mean.default):
                x = _val(node.args[0])
                dims = node.args[1] if target is aten.mean.dim and len(node.args) > 1 else None
                dims = list(range(x.dim())) if not dims else [d % x.dim() for d in dims]
                if any(symbolic(x.shape[d]) for d in dims):
                    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
                    count = sympy.Integer(1)
                    for d in dims:
                        count = count * _expr(x.shape[d])
                    with graph.inserting_before(node):
                        s = graph.call_function(aten.sum.dim_IntList, (node.args[0], dims, keepdim),
                                                {"dtype": node.kwargs.get("dtype")})
                        s.meta["val"] = node.meta.get("val")
                        q = graph.call_function(aten.div.Tensor, (s, size_input(count)))
                        q.meta["val"] = node.meta.get("val")
                    node.replace_all_uses_with(q)
                    graph.erase_node(node)
        self.value_sizes = list(extra)  # size indices of the added placeholders, in order
        graph.lint()
        new_gm.recompile()
        return new_gm

    @staticmethod
    def _mask_scatter_rows(graph, node, size_input):
        """embedding_dense_backward scatters every row of its gradient, and
        XLA masks no scatter: the rows past each varying index dimension's
        length are zeroed first (a select, so garbage there never leaks)."""
        grad, idx = node.args[0], node.args[1]
        if len(node.args) > 4 and node.args[4]:
            raise Refused("embedding backward with scale_grad_by_freq counts padded indices")
        iv = _val(idx)
        with graph.inserting_before(node):
            for d, s in enumerate(iv.shape):
                if not symbolic(s):
                    continue
                n = graph.call_function(aten.sym_size.int, (idx, d))
                pos = graph.call_function(aten.arange.default, (n,),
                                          {"dtype": torch.int64, "device": iv.device})
                past = graph.call_function(aten.ge.Tensor, (pos, size_input(_expr(s))))
                for _ in range(iv.dim() - d):  # over the later index dims and the embedding
                    past = graph.call_function(aten.unsqueeze.default, (past, -1))
                grad = graph.call_function(aten.masked_fill.Scalar, (grad, past, 0.0))
        node.args = (grad,) + tuple(node.args[1:])

    def values(self, args):
        """Each symbol's value in this call."""
        out = {}
        for s, (i, d) in self.binders.items():
            a = args[i]
            out[s] = int(a.shape[d]) if d is not None else int(a)
        return out
