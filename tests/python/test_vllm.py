"""vLLM serving a model on tpu through the platform plugin (torch_tpu/vllm).

A tiny random Llama is written to disk (config, safetensors, tokenizer: no
downloads); vLLM's own engine, scheduler, sampler and OpenAI server run it on
tpu, and every token is checked against transformers' greedy generate() on
CPU in float32. vLLM sets process-wide state, so it runs in processes of its
own: vllm_cases.py (offline engine) and `vllm serve`.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("vllm")

from torch_tpu.vllm.tiny_model import write_tiny_llama  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def _env(**extra):
    env = dict(os.environ)
    env.pop("TORCH_TPU_DEFER_AND_FUSE", None)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_llama(str(tmp_path_factory.mktemp("tiny_llama")))


def _run_cases(model_dir, out, *flags):
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "vllm_cases.py"), model_dir, str(out), *flags],
        env=_env(VLLM_ENABLE_V1_MULTIPROCESSING="0"), capture_output=True, text=True,
        timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def cases(model_dir, tmp_path_factory):
    return _run_cases(model_dir, tmp_path_factory.mktemp("vllm") / "cases.json")


@pytest.mark.parametrize("arch", ["mistral", "gemma2"])
def test_windowed_and_soft_capped_models_equal_transformers_on_cpu(tmp_path, arch):
    """Mistral: an 8-key sliding window, shorter than the prompts; Gemma 2:
    soft-capped attention scores and logits, windowed and global layers."""
    model = write_tiny_llama(str(tmp_path / arch), arch=arch)
    result = _run_cases(model, tmp_path / "cases.json", "--only-batch")
    assert result["batch"] == result["reference"]


def test_vllm_selects_the_tpu_platform(cases):
    assert cases["platform"] == "TpuPlatform"


def test_batched_greedy_generation_equals_transformers_on_cpu(cases):
    assert cases["batch"] == cases["reference"]


def test_the_worker_runs_fused_eager_and_strict_gives_the_same_tokens(cases):
    assert cases["mode"] == "DEFER_AND_FUSE"
    assert cases["strict"] == cases["reference"]


def test_requests_joining_a_running_batch_get_the_same_tokens(cases):
    assert cases["continuous"] == cases["reference"]


def test_prompt_longer_than_the_context_is_vllms_error_and_the_engine_stays_up(cases):
    kind, message = cases["too_long"]
    assert kind == "VLLMValidationError"
    assert "maximum context length is 128" in message and "200" in message
    assert cases["after_error"] == cases["reference"]


@pytest.mark.parametrize("case", ["attention", "attention_window", "attention_soft_cap"])
def test_paged_attention_equals_dense_causal_sdpa(cases, case):
    attention, cache = cases[case]
    assert attention < 1e-5
    assert cache == 0.0


def test_a_kv_cache_too_small_is_vllms_error_and_the_next_engine_starts(cases):
    kind, message = cases["kv_too_small"]
    assert kind == "ValueError" and "No available memory for the cache blocks" in message
    assert cases["batch"] == cases["reference"]  # an engine built after it


def test_a_quantization_not_served_on_tpu_is_refused_at_engine_start(cases):
    is_value_error, message = cases["quantized"]  # vLLM's config validation wraps it
    assert is_value_error and "fp8 quantization is not supported on tpu" in message


def test_a_model_whose_attention_is_not_served_is_refused_clearly(tmp_path):
    model = write_tiny_llama(str(tmp_path / "bloom"), arch="bloom")
    result = _run_cases(model, tmp_path / "cases.json", "--unsupported")
    kind, message = result["unsupported"]
    assert kind == "NotImplementedError" and "ALiBi" in message


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_openai_server_completions_equal_transformers_on_cpu(cases, model_dir, tmp_path):
    """`vllm serve` (its default engine process) on tpu: real HTTP requests on
    localhost, a bad request answered with vLLM's 400, the server up after."""
    from vllm_cases import MAX_TOKENS, PROMPTS

    port = _free_port()
    vllm_cli = os.path.join(os.path.dirname(sys.executable), "vllm")
    log = open(tmp_path / "serve.log", "w")
    server = subprocess.Popen(
        [vllm_cli, "serve", model_dir, "--dtype", "float32", "--max-model-len", "128",
         "--max-num-seqs", "8", "--max-num-batched-tokens", "128",
         "--kv-cache-memory-bytes", str(8 << 20), "--host", "127.0.0.1", "--port", str(port)],
        env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()[-6000:]
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.monotonic() < deadline, "vllm serve did not come up in 600 s"
            time.sleep(1)

        def complete(prompt):
            return _post(base + "/v1/completions", {
                "model": model_dir, "prompt": prompt, "max_tokens": MAX_TOKENS,
                "temperature": 0, "ignore_eos": True, "return_token_ids": True})

        for i in (0, 4):
            status, body = complete(PROMPTS[i])
            assert status == 200, body
            assert body["choices"][0]["token_ids"] == cases["reference"][i]

        status, body = complete(list(range(3, 203)))
        assert status == 400
        assert "maximum context length" in json.dumps(body)

        status, body = complete(PROMPTS[2])
        assert status == 200 and body["choices"][0]["token_ids"] == cases["reference"][2]
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
