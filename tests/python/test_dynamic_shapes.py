"""torch.compile(backend="tpu") over varying sizes: one program per bucket
(torch_tpu/dynamic_shapes.py), every result equal to CPU at the true size."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu
from torch_tpu import dynamic_shapes as ds
from conftest import assert_same

LENGTHS = [3, 5, 8, 13, 17, 30, 4, 31, 9]  # every bucket of [1, 32]: 4, 8, 16, 32
UPPER = 32


@pytest.fixture(autouse=True)
def fresh_dynamo(highest_precision):
    torch._dynamo.reset()
    torch_tpu.compiler._bucket_compiles.clear()
    yield


def bucket_captures():
    return torch_tpu.compiler.compile_metrics().get("bucket_compiles", {})


def assert_one_program_per_bucket(graphs=1):
    per_graph = bucket_captures()
    assert len(per_graph) == graphs, per_graph
    for graph, per_bucket in per_graph.items():
        assert all(n == 1 for n in per_bucket.values()), (graph, per_bucket)
        assert len(per_bucket) <= len(ds.buckets(1, UPPER)), (graph, per_bucket)


def run_lengths(fn, make_inputs, dims, atol=1e-5, rtol=1e-5):
    compiled = torch.compile(fn, backend="tpu")
    for n in LENGTHS:
        torch.manual_seed(n)
        cpu_inputs = make_inputs(n)
        tpu_inputs = []
        for t, d in zip(cpu_inputs, dims):
            t = t.to("tpu")
            if d is not None:
                t = torch.tpu.mark_dynamic(t, d, 1, UPPER)
            tpu_inputs.append(t)
        with torch.no_grad():
            assert_same(compiled(*tpu_inputs), fn(*cpu_inputs), atol=atol, rtol=rtol)


def test_bucket_sizes():
    assert ds.buckets(1, 512) == [64, 128, 256, 512]
    assert ds.buckets(1, 512, num=8, size=128) == [128, 256, 384, 512]
    assert ds.buckets(1, 512, num=2, size=128) == [256, 512]
    assert ds.buckets(1, 100) == [16, 32, 56, 100]
    assert ds.bucket_of(1, 1, 512) == 64 and ds.bucket_of(300, 1, 512) == 512
    assert ds.bucket_of(17, 2, None) == 32  # no upper bound: powers of two


@pytest.mark.parametrize("options, message", [
    ({"num_dynamic_buckets": 9}, "between 1 and 8"),
    ({"num_dynamic_buckets": "4"}, "between 1 and 8"),
    ({"bucket_size": 0}, "positive integer"),
])
def test_bad_bucket_options_say_what_is_wrong(options, message):
    with pytest.raises(ValueError, match=message):
        ds.check_options(options)
    compiled = torch.compile(lambda x: x.sum(), backend="tpu", options=options)
    with pytest.raises(Exception, match=message):
        compiled(torch.ones(3, device="tpu"))


def test_mark_dynamic_checks_its_arguments():
    t = torch.ones(2, 5, device="tpu")
    with pytest.raises(ValueError, match="out of range"):
        torch.tpu.mark_dynamic(t, 2, 1, 8)
    with pytest.raises(ValueError, match="outside"):
        torch.tpu.mark_dynamic(t, 1, 1, 4)
    with pytest.raises(ValueError, match="above upper"):
        torch.tpu.mark_dynamic(t, 1, 9, 8)
    assert torch.tpu.mark_dynamic(t, 1, 1, 8) is t
    assert t._dynamo_dynamic_indices == {1}


def test_sum_over_marked_dim():
    run_lengths(lambda x: x.sum(1), lambda n: [torch.randn(3, n)], [1])
    assert_one_program_per_bucket()


def test_lengths_one_and_two_work_with_marks():
    # Dynamo specializes a size of 1 (its own static graph), so a strict mark
    # there would be an error; mark_dynamic leaves such a dimension unmarked.
    compiled = torch.compile(lambda x: torch.softmax(x, 1).sum(0), backend="tpu")
    for n in [1, 2, 1, 5, 3]:
        x = torch.randn(2, n)
        out = compiled(torch.tpu.mark_dynamic(x.to("tpu"), 1, 1, UPPER))
        assert_same(out, torch.softmax(x, 1).sum(0), atol=1e-5, rtol=1e-5)
    assert_one_program_per_bucket()


def test_mean_over_marked_dim():
    run_lengths(lambda x: (x.mean(1), x.mean()), lambda n: [torch.randn(2, n, 4)], [1])
    assert_one_program_per_bucket()


def test_softmax_over_marked_dim():
    run_lengths(lambda x: torch.softmax(x * 3, -1), lambda n: [torch.randn(2, n)], [1])
    assert_one_program_per_bucket()


def test_layer_norm_with_marked_length():
    torch.manual_seed(0)
    ln = nn.LayerNorm(8)
    ln_tpu = copy.deepcopy(ln).to("tpu")
    compiled = torch.compile(lambda m, x: m(x).sum(1), backend="tpu")
    for n in LENGTHS:
        x = torch.randn(2, n, 8)
        xt = torch.tpu.mark_dynamic(x.to("tpu"), 1, 1, UPPER)
        with torch.no_grad():
            assert_same(compiled(ln_tpu, xt), ln(x).sum(1), atol=1e-5, rtol=1e-5)
    assert_one_program_per_bucket()


def test_sdpa_causal_over_marked_length():
    def attn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    run_lengths(attn, lambda n: [torch.randn(2, 2, n, 8) for _ in range(3)], [2, 2, 2])
    assert_one_program_per_bucket()


def test_sdpa_padding_mask_over_marked_length():
    def attn(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def inputs(n):
        keep = torch.rand(2, 1, 1, n) > 0.3
        keep[..., 0] = True  # every query sees a key
        return [torch.randn(2, 2, n, 8) for _ in range(3)] + [keep.expand(2, 1, n, n).contiguous()]

    compiled = torch.compile(attn, backend="tpu")
    for n in LENGTHS:
        torch.manual_seed(n)
        cpu = inputs(n)
        tpu = [torch.tpu.mark_dynamic(t.to("tpu"), 2, 1, UPPER) for t in cpu[:3]]
        tpu.append(torch.tpu.mark_dynamic(cpu[3].to("tpu"), [2, 3], 1, UPPER))
        with torch.no_grad():
            assert_same(compiled(*tpu), attn(*cpu), atol=1e-5, rtol=1e-5)
    assert_one_program_per_bucket()


@pytest.mark.parametrize("batch", [None, 1])
def test_cross_entropy_over_marked_length(batch):
    def loss(logits, target):
        if batch is None:
            return F.cross_entropy(logits, target)
        return F.cross_entropy(logits.flatten(0, 1), target.flatten())

    def inputs(n):
        shape = (n,) if batch is None else (batch, n)
        return [torch.randn(*shape, 11), torch.randint(0, 11, shape)]

    d = 0 if batch is None else 1
    run_lengths(loss, inputs, [d, d])
    assert_one_program_per_bucket()


class TinyGPT(nn.Module):
    def __init__(self, vocab=13, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(UPPER, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids, targets):
        logits = self.logits(ids)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def logits(self, ids):
        b, t = ids.shape
        h = self.emb(ids) + self.pos(torch.arange(t, device=ids.device))
        q, k, v = self.qkv(self.ln1(h)).split(h.shape[-1], dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.proj(a.transpose(1, 2).reshape(b, t, -1))
        h = h + self.mlp(self.ln2(h))
        return self.head(h)


@pytest.mark.parametrize("batch", [1, 2])
def test_training_step_over_lengths_matches_cpu_gradients(batch):
    torch.manual_seed(0)
    cpu_model = TinyGPT()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    compiled = torch.compile(tpu_model, backend="tpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train_over_lengths(cpu_model, tpu_model, compiled, batch, LENGTHS)
    assert not [w for w in caught if "once per size" in str(w.message)], \
        [str(w.message) for w in caught]
    # forward and backward: at most one program per bucket each (at batch 2
    # the forward saves linear layers' inputs in XLA's packed form, and the
    # backward splits the loss gradient back out of it)
    per_graph = bucket_captures()
    assert len(per_graph) == 2, per_graph
    for graph, per_bucket in per_graph.items():
        assert all(c == 1 for c in per_bucket.values()), (graph, per_bucket)
        assert len(per_bucket) <= 4


def test_training_with_batch_and_length_varying_matches_cpu_gradients():
    # dynamic=True: the batch varies too, so XLA's packed rows of [b*n, d]
    # are i*n + j over two bounded sizes.
    torch.manual_seed(0)
    cpu_model = TinyGPT()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    compiled = torch.compile(tpu_model, backend="tpu", dynamic=True)
    for b, n in ((2, 5), (3, 9), (2, 13), (4, 7), (3, 30)):
        ids, targets = torch.randint(0, 13, (b, n)), torch.randint(0, 13, (b, n))
        assert_step_matches(compiled(ids.to("tpu"), targets.to("tpu")), cpu_model(ids, targets),
                            cpu_model.parameters(), tpu_model.parameters())
    assert_one_program_per_bucket(graphs=2)


def test_shifted_labels_loss_buckets():
    # transformers' causal LM loss: labels padded with the ignore index at the
    # end of the length, then shifted (`[..., 1:]`).
    torch.manual_seed(0)
    head = nn.Linear(8, 11)
    head_tpu = copy.deepcopy(head).to("tpu")

    def loss(m, h, labels):
        labels = F.pad(labels, (0, 1), value=-100)[..., 1:]
        return F.cross_entropy(m(h).flatten(0, 1), labels.flatten(), ignore_index=-100)

    compiled = torch.compile(loss, backend="tpu")
    for n in LENGTHS:
        h, labels = torch.randn(2, n, 8), torch.randint(0, 11, (2, n))
        ht = torch.tpu.mark_dynamic(h.to("tpu"), 1, 1, UPPER)
        got = compiled(head_tpu, ht, torch.tpu.mark_dynamic(labels.to("tpu"), 1, 1, UPPER))
        assert_step_matches(got, loss(head, h, labels), head.parameters(), head_tpu.parameters())
    assert_one_program_per_bucket(graphs=2)


def test_select_of_a_position_every_length_has_buckets():
    # BERT's pooler reads hidden[:, 0]: position 0 exists at every length,
    # so the select runs on the static padded tensor.
    run_lengths(lambda x: torch.tanh(x[:, 0] * 2.0) + x.sum(1), lambda n: [torch.randn(3, n, 4)],
                [1])
    assert_one_program_per_bucket()


def test_select_backward_along_a_varying_dimension_matches_cpu_gradients():
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    lin_tpu = copy.deepcopy(lin).to("tpu")

    def loss(m, x):  # the gradient reaches only position 0 of each row's length
        return (m(x)[:, 0] ** 2).sum() + m(x).mean()

    compiled = torch.compile(loss, backend="tpu")
    for n in LENGTHS:
        x = torch.randn(2, n, 4, requires_grad=True)
        xt = torch.tpu.mark_dynamic(x.detach().to("tpu"), 1, 1, UPPER).requires_grad_()
        assert_step_matches(compiled(lin_tpu, xt), loss(lin, x), lin.parameters(),
                            lin_tpu.parameters())
        assert_same(xt.grad, x.grad, atol=2e-5, rtol=1e-4)
    assert_one_program_per_bucket(graphs=2)


def test_select_of_a_position_counted_from_the_end_is_refused():
    f = torch.compile(lambda x: x[:, -1] * 2.0, backend="tpu")  # moves with the length
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (4, 7):
            x = torch.randn(2, n)
            assert_same(f(torch.tpu.mark_dynamic(x.to("tpu"), 1, 1, UPPER)), x[:, -1] * 2.0)
    assert any("select" in str(w.message) and "varying" in str(w.message) for w in caught), \
        [str(w.message) for w in caught]
    assert not bucket_captures()


def test_select_past_the_first_positions_buckets_within_dynamos_guard():
    # x[:, 3] makes Dynamo guard the length above 3: every length the graph
    # serves has position 3.
    f = torch.compile(lambda x: x[:, 3] * 2.0 + x.sum(1), backend="tpu", dynamic=True)
    for n in (5, 9, 13, 30):
        x = torch.randn(2, n)
        assert_same(f(x.to("tpu")), x[:, 3] * 2.0 + x.sum(1), atol=1e-5, rtol=1e-5)
    per_graph = bucket_captures()
    assert per_graph and all(c == 1 for b in per_graph.values() for c in b.values()), per_graph


def test_a_bucketed_program_that_fails_to_compile_runs_the_graph_eagerly():
    compiled = torch.compile(lambda x: torch.softmax(x, 1).sum(0), backend="tpu")
    x = torch.randn(2, 5)
    xt = torch.tpu.mark_dynamic(x.to("tpu"), 1, 1, UPPER)
    xt.cpu()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch_tpu._C._fail_next_flush()  # the capture's program, as if XLA rejected it
        assert_same(compiled(xt), torch.softmax(x, 1).sum(0), atol=1e-5, rtol=1e-5)
    assert any("runs eagerly at each size" in str(w.message) and "failed to compile"
               in str(w.message) for w in caught), [str(w.message) for w in caught]
    for n in (3, 9):  # later sizes run eagerly too, and right
        x = torch.randn(2, n)
        out = compiled(torch.tpu.mark_dynamic(x.to("tpu"), 1, 1, UPPER))
        assert_same(out, torch.softmax(x, 1).sum(0), atol=1e-5, rtol=1e-5)
    # The failed capture ended: eager ops run eagerly again (an index check
    # reports at the host read, which no capture would).
    bad = torch.ones(3, device="tpu")[torch.tensor([7]).to("tpu")]
    with pytest.raises(IndexError, match="out of bounds"):
        bad.cpu()


def assert_step_matches(loss_t, loss, cpu_params, tpu_params):
    """Backward on both sides; the tpu loss and gradients equal CPU's (the
    gradients are cleared for the next step)."""
    loss.backward()
    loss_t.backward()
    assert_same(loss_t, loss.detach(), atol=1e-5, rtol=1e-5)
    for p, pt in zip(cpu_params, tpu_params):
        assert_same(pt.grad, p.grad, atol=2e-5, rtol=1e-4)
        p.grad = pt.grad = None


def train_over_lengths(cpu_model, tpu_model, compiled, batch, lengths):
    for n in lengths:
        ids = torch.randint(0, 13, (batch, n))
        targets = torch.randint(0, 13, (batch, n))
        ids_t = torch.tpu.mark_dynamic(ids.to("tpu"), 1, 1, UPPER)
        targets_t = torch.tpu.mark_dynamic(targets.to("tpu"), 1, 1, UPPER)
        assert_step_matches(compiled(ids_t, targets_t), cpu_model(ids, targets),
                            cpu_model.parameters(), tpu_model.parameters())


@pytest.mark.parametrize("batch", [2, 3])
def test_gpt_inference_at_batch_above_one_buckets(batch):
    # Every linear layer reshapes [b, n, d] -> [b*n, d]: it runs on the
    # static padded form and the split back gives the lengths back.
    torch.manual_seed(0)
    cpu_model = TinyGPT().eval()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    compiled = torch.compile(lambda m, ids: m.logits(ids), backend="tpu")
    for n in LENGTHS:
        ids = torch.randint(0, 13, (batch, n))
        with torch.no_grad():
            assert_same(compiled(tpu_model, torch.tpu.mark_dynamic(ids.to("tpu"), 1, 1, UPPER)),
                        cpu_model.logits(ids), atol=1e-5, rtol=1e-5)
    assert_one_program_per_bucket()


def test_embedding_with_batch_and_length_varying_equals_cpu():
    # Indices [b, n], both varying: flattening them would let XLA compact
    # the valid elements (rows of the second batch read from the first's
    # padding); the embedding runs on the static padded indices instead.
    torch.manual_seed(0)
    emb = nn.Embedding(10, 4)
    emb_tpu = copy.deepcopy(emb).to("tpu")
    fn = torch.compile(lambda m, i: m(i).sum(-1), backend="tpu", dynamic=True)
    for b, n in ((2, 3), (3, 5), (2, 6), (4, 9)):
        ids = torch.randint(0, 10, (b, n))
        with torch.no_grad():
            assert_same(fn(emb_tpu, ids.to("tpu")), emb(ids).sum(-1), atol=1e-6, rtol=1e-6)
    per_graph = bucket_captures()
    assert per_graph and all(c == 1 for b in per_graph.values() for c in b.values()), per_graph


def test_row_wise_ops_on_merged_positions_bucket():
    # On [b*n, d]: layer norm, softmax and a mean over d treat each merged
    # position on its own; the view back to [b, n, d] gives n back.
    torch.manual_seed(0)
    lin, ln = nn.Linear(4, 6), nn.LayerNorm(6)
    lin_tpu, ln_tpu = copy.deepcopy(lin).to("tpu"), copy.deepcopy(ln).to("tpu")

    def f(lin, ln, x):
        h = ln(lin(x).flatten(0, 1))
        h = torch.softmax(h, -1) * h.mean(-1, keepdim=True)
        return h.view(x.shape[0], x.shape[1], -1).sum(1)

    compiled = torch.compile(f, backend="tpu")
    for n in LENGTHS[:5]:
        x = torch.randn(3, n, 4)
        with torch.no_grad():
            assert_same(compiled(lin_tpu, ln_tpu, torch.tpu.mark_dynamic(x.to("tpu"), 1, 1, UPPER)),
                        f(lin, ln, x), atol=1e-5, rtol=1e-5)
    assert_one_program_per_bucket()


def test_reducing_merged_positions_and_returning_them():
    # A sum over [b*n, 3] and a [b*n, 3] result: both take XLA's packed
    # form (valid rows first, in order), where it masks the padded rows.
    torch.manual_seed(0)
    lin = nn.Linear(4, 3)
    lin_tpu = copy.deepcopy(lin).to("tpu")

    def f(m, x):
        h = m(x).flatten(0, 1)
        return h.sum(0), h * 2

    run_lengths(lambda x: f(lin_tpu if x.device.type == "tpu" else lin, x),
                lambda n: [torch.randn(2, n, 4)], [1])
    assert_one_program_per_bucket()


def test_other_ops_on_merged_positions_take_the_packed_form():
    # A slice along d of [b*n, d] returned as it is: it reads the packed
    # form (valid rows first), not the padded layout.
    torch.manual_seed(0)
    lin = nn.Linear(4, 6)
    lin_tpu = copy.deepcopy(lin).to("tpu")

    def f(x):
        m = lin_tpu if x.device.type == "tpu" else lin
        return m(x).flatten(0, 1)[:, 2:]

    run_lengths(f, lambda n: [torch.randn(2, n, 4)], [1])
    assert_one_program_per_bucket()


MERGED_CASES = {  # ops reading across merged positions, on [b*n, d] from a linear layer
    "softmax": lambda h, x: h.softmax(0),
    "cumsum": lambda h, x: h.cumsum(0),
    "amax": lambda h, x: h.amax(0),
    "gram": lambda h, x: h @ h.T,
    "split_transpose": lambda h, x: h.view(x.shape[0], x.shape[1], -1).transpose(0, 1).sum(0),
    "view_all": lambda h, x: h.reshape(-1).sum(),
    "mean": lambda h, x: h.mean(0),
    "add_merged_input": lambda h, x: h + x.flatten(0, 1),
    "result_and_split": lambda h, x: (h, h.view(x.shape[0], -1, 4).mean(1)),
    "cat": lambda h, x: torch.cat([h, x.flatten(0, 1)], 1),
    "logsumexp_rows": lambda h, x: h.logsumexp(-1),
    "first_row": lambda h, x: h[0],  # refused: a static view of a bounded tensor
    "norm_rows": lambda h, x: F.normalize(h, dim=-1),
    "var_rows": lambda h, x: h.var(-1),
    "max_rows": lambda h, x: h.max(-1).values,
    "sort_rows": lambda h, x: h.sort(-1).values,
    "var_merged": lambda h, x: h.var(0),  # refused: its count is the padded size
}


@pytest.mark.parametrize("case", sorted(MERGED_CASES))
def test_ops_on_merged_positions_equal_cpu(case):
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    lin_tpu = copy.deepcopy(lin).to("tpu")

    def f(x):
        return MERGED_CASES[case]((lin_tpu if x.device.type == "tpu" else lin)(x).flatten(0, 1), x)

    run_lengths(f, lambda n: [torch.randn(2, n, 4)], [1], atol=2e-5, rtol=2e-5)
    if case not in ("first_row", "var_merged"):
        assert_one_program_per_bucket()


def test_ops_along_a_static_dim_of_a_bounded_tensor():
    def f(x):  # x [2, n, 5]: each works along the last dim only
        return (x.var(-1), x.std(-1, correction=0), torch.linalg.vector_norm(x, dim=-1),
                x.max(-1).values, x.argmin(-1), x.sort(-1).values, x.topk(2).values)

    run_lengths(f, lambda n: [torch.randn(2, n, 5)], [1])
    assert_one_program_per_bucket()


def test_small_host_tensor_arguments_stay_bucketed():
    # A graph may take 0-d CPU tensors (constants lifted out of a model):
    # they are baked into the program as in a static graph.
    compiled = torch.compile(lambda x, s: x.sum(1) * s, backend="tpu")
    for n in LENGTHS[:4]:
        x, s = torch.randn(2, n), torch.tensor(1.5)
        with torch.no_grad():
            assert_same(compiled(torch.tpu.mark_dynamic(x.to("tpu"), 1, 1, UPPER), s),
                        x.sum(1) * s, atol=1e-5, rtol=1e-5)
    assert_one_program_per_bucket()


def test_mask_gathered_with_arange_of_the_length():
    # transformers builds its attention masks as mask[batch_idx, arange(n)]
    def f(x, mask):
        keep = mask.bool()[torch.arange(mask.shape[0], device=x.device)[:, None],
                           torch.arange(mask.shape[1], device=x.device)[None, :]]
        return torch.where(keep, x, 0.0).sum(1)

    def inputs(n):
        return [torch.randn(2, n), (torch.rand(2, n) > 0.4).long()]

    run_lengths(f, inputs, [1, 1])
    assert_one_program_per_bucket()


def test_gather_with_other_indices_along_a_varying_dimension_is_refused():
    def f(x, idx):  # idx could point past the true length (or wrap from the padded end)
        return x[:, idx].sum(1)

    compiled = torch.compile(f, backend="tpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (4, 7):
            x, idx = torch.randn(2, n), torch.tensor([0, -1, 2])
            out = compiled(torch.tpu.mark_dynamic(x.to("tpu"), 1, 1, UPPER), idx.to("tpu"))
            assert_same(out, f(x, idx), atol=1e-5, rtol=1e-5)
    assert any("not arange" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert not bucket_captures()


def _tiny_transformers_model(family):
    transformers = pytest.importorskip("transformers")
    small = dict(vocab_size=64, max_position_embeddings=64)
    if family == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, **small))
    if family == "qwen2":
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, **small))
    if family == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=64, n_positions=64, n_embd=32, n_layer=1, n_head=2))
    if family == "bert":
        return transformers.BertModel(transformers.BertConfig(
            hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
            **small))
    return transformers.OPTForCausalLM(transformers.OPTConfig(
        hidden_size=32, ffn_dim=64, num_hidden_layers=1, num_attention_heads=2,
        word_embed_proj_dim=32, **small))


def _model_outputs(out):
    if hasattr(out, "logits"):
        return [out.logits]
    return [out.last_hidden_state, out.pooler_output]


@pytest.mark.parametrize("family", ["llama", "gpt2", "opt", "bert"])
def test_transformers_models_with_mask_at_batch_two_bucket(family):
    # What each family's graph has: transformers' masks gathered by arange
    # (llama), a true_divide (gpt2), cumsum positions and layer norm on
    # [b*n, d] (opt), the pooler's select of position 0 (bert); all at
    # batch 2 under dynamic=True.
    torch.manual_seed(0)
    cpu_model = _tiny_transformers_model(family).eval()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    compiled = torch.compile(tpu_model, backend="tpu", dynamic=True)
    for n in (5, 9, 13, 30):
        ids = torch.randint(1, 64, (2, n))
        mask = torch.ones_like(ids)
        mask[0, :2] = 0  # left padding in the first row
        with torch.no_grad():
            out = _model_outputs(compiled(ids.to("tpu"), attention_mask=mask.to("tpu")))
            assert_same(out, _model_outputs(cpu_model(ids, attention_mask=mask)),
                        atol=1e-5, rtol=1e-5)
    per_graph = bucket_captures()
    assert len(per_graph) == 1, per_graph
    per_bucket = next(iter(per_graph.values()))
    assert all(c == 1 for c in per_bucket.values()) and len(per_bucket) <= 3, per_graph


def test_bert_training_with_a_padding_mask_buckets_and_matches_cpu_gradients():
    # The pooler's select of position 0 and its backward run on the static
    # padded hidden states: one forward and one backward program per bucket.
    torch.manual_seed(0)
    cpu_model = _tiny_transformers_model("bert").eval()  # no dropout; gradients still flow
    tpu_model = copy.deepcopy(cpu_model).to("tpu")

    def loss(model, ids, mask):
        out = model(ids, attention_mask=mask)
        return out.pooler_output.pow(2).sum() + out.last_hidden_state.mean()

    compiled = torch.compile(loss, backend="tpu", dynamic=True)
    for n in (5, 9, 13, 30):
        ids = torch.randint(1, 64, (2, n))
        mask = torch.ones_like(ids)
        mask[0, :2] = 0
        assert_step_matches(compiled(tpu_model, ids.to("tpu"), mask.to("tpu")),
                            loss(cpu_model, ids, mask), cpu_model.parameters(),
                            tpu_model.parameters())
    assert_one_program_per_bucket(graphs=2)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_causal_lm_training_with_batch_and_length_varying_buckets(family):
    # Their backward slices the rotary halves along the static head dim
    # (slice_backward) and splits [b*h, n, d] with b varying; both run on
    # the static padded form. (GPT-2's backward still compiles per size.)
    torch.manual_seed(0)
    cpu_model = _tiny_transformers_model(family).eval()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")

    def loss(model, ids, mask):
        return model(ids, attention_mask=mask, labels=ids).loss

    compiled = torch.compile(loss, backend="tpu", dynamic=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for b, n in ((2, 5), (3, 9), (2, 13), (2, 30)):
            ids = torch.randint(1, 64, (b, n))
            mask = torch.ones_like(ids)
            mask[0, :2] = 0
            assert_step_matches(compiled(tpu_model, ids.to("tpu"), mask.to("tpu")),
                                loss(cpu_model, ids, mask), cpu_model.parameters(),
                                tpu_model.parameters())
    assert not [w for w in caught if "size" in str(w.message)], [str(w.message) for w in caught]
    assert_one_program_per_bucket(graphs=2)


def test_dynamic_true_buckets_without_marks():
    fn = torch.compile(lambda x: torch.softmax(x, -1).sum(0), backend="tpu", dynamic=True)
    for n in [3, 5, 6, 7, 9, 12]:
        x = torch.randn(4, n)
        assert_same(fn(x.to("tpu")), torch.softmax(x, -1).sum(0), atol=1e-5, rtol=1e-5)
    per_graph = bucket_captures()
    assert per_graph and all(c == 1 for b in per_graph.values() for c in b.values()), per_graph


def test_refused_graph_runs_specialized_with_a_reason():
    def f(x):
        return x[:, :-1].sum(1)  # a slice along the varying dimension

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in [4, 6, 9]:
            x = torch.randn(2, n)
            assert_same(compiled(x.to("tpu")), f(x), atol=1e-5, rtol=1e-5)
    assert any("compiles once per size" in str(w.message) and "slice" in str(w.message)
               for w in caught), [str(w.message) for w in caught]
    assert not bucket_captures()


def test_reduction_of_a_tensor_made_in_the_graph_is_refused():
    def f(x):  # ones(n) is not padded by an input: XLA would sum the bucket's size
        return x.sum(1) + torch.ones(x.shape[1], device=x.device).sum()

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in [3, 6]:
            x = torch.randn(2, n)
            assert_same(compiled(x.to("tpu")), f(x), atol=1e-5, rtol=1e-5)
    assert any("made in the graph" in str(w.message) for w in caught), \
        [str(w.message) for w in caught]


def test_metrics_report_counts_compiles_per_bucket():
    run_lengths(lambda x: x.sum(1), lambda n: [torch.randn(3, n)], [1])
    report = torch_tpu.metrics_report()
    assert "compiles per bucket" in report
    for b in ds.buckets(1, UPPER):
        assert f"={b}]: 1" in report, report


def test_sliced_inputs_whose_stride_varies_compile_once_per_bucket():
    f = torch.compile(lambda x, y: (x * 2.0 + y).sum(1), backend="tpu")
    for n in LENGTHS:
        tokens = torch.randn(1, n + 1)
        x, y = tokens[:, :-1], tokens[:, 1:]  # strides (n + 1, 1): Dynamo's stride symbol
        xt = torch.tpu.mark_dynamic(tokens.to("tpu")[:, :-1], 1, 1, UPPER)
        yt = torch.tpu.mark_dynamic(tokens.to("tpu")[:, 1:], 1, 1, UPPER)
        assert_same(f(xt, yt), (x * 2.0 + y).sum(1), atol=1e-5, rtol=1e-5)
    assert_one_program_per_bucket()

