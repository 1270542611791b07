"""The fixed CI slice of OpInfos (tests/conformance default run, coverage --quick):
a few of each family, chosen to run in about a minute or two on two cores."""

SLICE = frozenset("""
    abs neg exp log sigmoid tanh sqrt rsqrt sin erf floor round.decimals_3 sign nan_to_num
    add sub mul div.no_rounding_mode div.floor_rounding pow maximum minimum atan2 fmod remainder
    eq lt logical_and bitwise_xor where clamp lerp addcmul
    sum mean amax argmax prod var std logsumexp cumsum all any norm
    mm bmm addmm matmul linalg.vector_norm
    reshape view permute transpose expand cat stack split narrow flip roll squeeze unsqueeze
    t repeat tril triu select index_select gather scatter_add take_along_dim masked_fill
    index_put sort topk
    nn.functional.relu nn.functional.gelu nn.functional.silu softmax
    log_softmax nn.functional.layer_norm nn.functional.linear nn.functional.conv1d
    nn.functional.adaptive_max_pool2d nn.functional.avg_pool2d nn.functional.embedding
    nn.functional.cross_entropy nn.functional.mse_loss nn.functional.pad.constant
    full_like zeros_like arange
""".split())

# Slice OpInfos that also run every other dtype (bfloat16, float16, int64,
# int32, bool, complex64) where they support it; the rest of the slice runs
# float32 only.
SLICE_ALL_DTYPES = frozenset("""
    abs add mul where sum amax cumsum eq clamp cat index_select sort mm
""".split())
