"""What vLLM generation needs before the first step (trl_zoo/config/vllm_engine.py): an installed vLLM inside
TRL's window, a context that holds a completion, an engine that fits its memory share; each refused in one line
before training, the stand-in of tests/vllm_stand_in.py standing for vLLM."""

import importlib.util
import os

import pytest
import torch

import trl_zoo
from tests import vllm_stand_in
from tests.tiny import make_trainer
from trl_zoo.config import vllm_engine

# vLLM 0.26's words when its KV cache does not fit the share (vllm/v1/core/kv_cache_utils.py)
KV_CACHE_ERROR = (
    "To serve at least one request with the models's max seq len (8192), (0.19 GiB KV cache is needed, which is "
    "larger than the available KV cache memory (0.02 GiB). Based on the available memory, the estimated maximum "
    "model length is 832. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
    "the engine.\nmore detail"
)


@pytest.fixture(autouse=True)
def single_process():
    yield
    assert not torch.distributed.is_initialized()


def failing_engine(monkeypatch, error):
    """vLLM's LLM() raising `error`, the launcher variables TRL set before it put back first (as the stand-in's)."""
    import trl.generation.vllm_generation as vllm_generation

    vllm_stand_in.install(monkeypatch)
    saved = {name: os.environ.get(name) for name in vllm_stand_in.LAUNCHER_VARIABLES}

    def fail(**kwargs):
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        raise error

    monkeypatch.setattr(vllm_generation, "LLM", fail)


def vllm_trainer(**overrides):
    return make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, use_vllm=True, vllm_mode="colocate", **overrides)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_use_vllm_without_vllm_is_one_line_naming_the_install():
    with pytest.raises(
        ValueError, match=r"^use_vllm=True needs vLLM, which is not installed: pip install 'vllm==0\.26\.0'"
    ):
        vllm_trainer()


@pytest.mark.parametrize("version", ["0.21.1", "0.32.0", "1.0.0"])
def test_a_vllm_outside_trls_window_is_refused(monkeypatch, version):
    vllm_stand_in.install(monkeypatch)
    monkeypatch.setattr(vllm_stand_in, "VERSION", version)
    monkeypatch.setattr(vllm_engine, "installed_vllm_version", lambda: version)
    with pytest.raises(
        ValueError, match=rf"^use_vllm=True with vLLM {version}: TRL supports vLLM 0\.22\.0 to 0\.31\.0"
    ):
        vllm_trainer()


@pytest.mark.parametrize("version", ["0.22.0", "0.26.0", "0.31.0", "0.24.0+cu129"])
def test_a_vllm_inside_the_window_passes(version):
    config = trl_zoo.GRPOConfig(output_dir="unused", use_cpu=True, use_vllm=True, report_to="none")
    vllm_engine.check_vllm_engine(config, version=version)


def test_a_context_shorter_than_a_completion_is_refused(monkeypatch):
    stand_in = vllm_stand_in.install(monkeypatch)
    with pytest.raises(
        ValueError,
        match=r"^vllm_max_model_length=8 leaves no room for a prompt beside "
        r"max_completion_length=8",
    ):
        vllm_trainer(vllm_max_model_length=8, max_completion_length=8)
    assert stand_in.engines == []  # refused before the engine was built


def test_a_context_with_room_builds(monkeypatch):
    stand_in = vllm_stand_in.install(monkeypatch)
    vllm_trainer(vllm_max_model_length=64, max_completion_length=8)
    assert len(stand_in.engines) == 1


def test_an_engine_that_does_not_fit_its_memory_share_is_one_line(monkeypatch):
    failing_engine(monkeypatch, ValueError(KV_CACHE_ERROR))
    with pytest.raises(ValueError) as caught:
        vllm_trainer(vllm_gpu_memory_utilization=0.02)
    message = str(caught.value)
    assert "\n" not in message and caught.value.__cause__ is None
    assert message.startswith("vllm_gpu_memory_utilization=0.02: vLLM's colocated engine does not fit that share")
    assert "estimated maximum model length is 832" in message and "raise vllm_gpu_memory_utilization" in message


def test_other_engine_errors_pass_through(monkeypatch):
    failing_engine(monkeypatch, RuntimeError("some other failure"))
    with pytest.raises(RuntimeError, match="^some other failure$"):
        vllm_trainer()


def test_a_prompt_longer_than_vllms_context_leaves_room_for_is_one_line(monkeypatch):
    from tests.trl_internals import generate_and_score

    vllm_stand_in.install(monkeypatch)
    long = [{"prompt": "10+30=" * 8} for _ in range(8)]  # 48 characters, one token each: 48 + 8 > 40
    trainer = vllm_trainer(vllm_max_model_length=40, max_completion_length=8)
    with pytest.raises(
        ValueError,
        match=r"^max_completion_length: a prompt of 48 tokens \+ max_completion_length 8 "
        r"= 56 exceeds vllm_max_model_length 40; ",
    ):
        generate_and_score(trainer, long)
