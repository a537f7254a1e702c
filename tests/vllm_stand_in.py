"""A stand-in for vLLM, so that TRL's vLLM generation paths run on CPU in tests (vLLM itself needs a GPU).

TRL 1.16 reaches vLLM through `trl.generation.vllm_generation` only:

- colocate mode builds `LLM(model=<path>, seed=<rank>, ...)` and calls `llm.generate(prompts, sampling_params=
  SamplingParams(...), use_tqdm=False)`, reading `output.prompt_token_ids`, `output.outputs[j].token_ids` and
  `output.outputs[j].logprobs` (one `{token_id: Logprob(logprob, rank)}` per generated token); it syncs weights
  with `llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights([(name, tensor)])` and then
  `llm.reset_prefix_cache()`;
- server mode builds `VLLMClient(base_url=..., group_port=..., connection_timeout=...)` and calls
  `init_communicator`, `get_server_info`, `generate(prompts=..., n=..., ...)` (a dict of `prompt_ids`,
  `completion_ids`, `logprobs`, `logprob_token_ids`), `update_named_params(metadata, named_tensors)` and
  `reset_prefix_cache`.

`install(monkeypatch)` puts a `vllm` package (version 0.25.0, inside TRL's supported range) into `sys.modules`, so
`trl.import_utils.is_vllm_available()` is true, and replaces those names in `trl.generation.vllm_generation` (its
`from vllm import ...` ran when TRL was imported, without vLLM). Both modes share one `SamplingEngine`:

- its own copy of the model, loaded from the checkpoint path as vLLM loads it, and changed only by TRL's weight
  sync, so a missing or wrong sync shows up as stale samples;
- plain-torch ancestral sampling, one prompt at a time (no padding), from p = softmax(logits / temperature),
  with a generator seeded by `LLM(seed=...)` (server: 0), so runs that start from the same weights sample the same
  completions; a completion ends after `<eos>` (kept, as vLLM keeps it) or `max_tokens` tokens;
- truncated sampling as vLLM's sampler does it, on the tempered logits: `top_k` keeps the k most probable tokens
  (0 or -1: all), then `top_p` the most probable ones whose mass, added in order, first reaches p (the token that
  crosses p kept), then `min_p` those with probability ≥ min_p · the largest; the token is drawn from the kept set
  renormalised;
- per token, the log-probability vLLM reports with `logprobs_mode="processed_logprobs"`: that of the kept set
  renormalised, log softmax(masked logits / temperature)[token] (log(π(y_t)/S_t), S_t the kept mass; without
  truncation the full distribution's), + `logprob_offset` (a number, or a function of the token id). The offset
  (0 by default) lets a test make the sampler's log-probs differ from the trainer's by a known amount, so TRL's
  importance ratio is a known number.

Repetition penalty, structured outputs, images and other `generation_kwargs` than top_p, top_k and min_p raise
NotImplementedError. `StandIn.generate_calls`, `.weight_syncs` and `.engines` count what TRL did.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForCausalLM

VERSION = "0.25.0"
LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # colocate mode sets them


# ---------------------------------------------------------------------------------------------- vLLM's data types
@dataclass
class Logprob:
    logprob: float
    rank: int
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str
    text: str = ""


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True


class SamplingParams:
    def __init__(self, n=1, repetition_penalty=1.0, temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, max_tokens=16,
                 logprobs=None, structured_outputs=None, detokenize=True, **unsupported):
        if unsupported or structured_outputs is not None:
            missing = sorted(unsupported) or "structured outputs"
            raise NotImplementedError(f"the vLLM stand-in does not implement {missing}")
        _check_no_penalty(repetition_penalty)
        self.n, self.temperature, self.max_tokens, self.logprobs = n, temperature, max_tokens, logprobs
        self.detokenize = detokenize  # the stand-in writes no text either way; `StandIn.detokenize` records it
        self.truncation = Truncation(top_p, top_k, min_p)


class StructuredOutputsParams:
    def __init__(self, **kwargs):
        raise NotImplementedError("the vLLM stand-in does not implement structured outputs")


def _check_no_penalty(repetition_penalty):
    if repetition_penalty != 1.0:
        raise NotImplementedError("the vLLM stand-in does not implement repetition_penalty")


@dataclass(frozen=True)
class Truncation:
    """vLLM's top_k, top_p and min_p (module docstring)."""

    top_p: float = 1.0
    top_k: int | None = 0
    min_p: float | None = 0.0

    def kept(self, logits: torch.Tensor) -> torch.Tensor:
        """(rows, vocab) bool: the tokens sampling may draw from the tempered `logits`."""
        probs = torch.softmax(logits, dim=-1)
        keep = torch.ones_like(probs, dtype=torch.bool)
        if self.top_k not in (0, -1, None):
            keep &= probs >= probs.topk(self.top_k, dim=-1).values[:, -1:]
        if self.top_p < 1.0:
            ordered, order = probs.masked_fill(~keep, 0.0).sort(dim=-1, descending=True)
            before = ordered.cumsum(-1) - ordered  # the mass of the more probable kept tokens
            keep &= torch.zeros_like(keep).scatter(-1, order, before < self.top_p * ordered.sum(-1, keepdim=True))
        if self.min_p:
            keep &= probs >= self.min_p * probs.amax(-1, keepdim=True)
        return keep


# ---------------------------------------------------------------------------------------------- the engine
class SamplingEngine:
    """The model a vLLM instance holds, its weight loading and its sampler (see the module docstring)."""

    def __init__(self, stand_in: StandIn, model_path: str, seed: int = 0):
        self.stand_in = stand_in
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        eos = self.model.generation_config.eos_token_id
        self.eos_token_ids = set(eos if isinstance(eos, list) else [eos])
        self.generator = torch.Generator().manual_seed(seed)

    def load_weights(self, weights):
        """vLLM's `model.load_weights`: (name, tensor) pairs under the training model's parameter names."""
        with torch.no_grad():
            for name, tensor in weights:
                self.model.get_parameter(name).copy_(tensor)
                self.stand_in.loaded_tensors += 1

    @torch.no_grad()
    def sample(self, prompt_ids: list[int], n: int, temperature: float, max_tokens: int,
               truncation: Truncation = Truncation()):
        """n completions of one prompt: [(token ids, per-token (log-prob, rank))]."""
        sequences = torch.tensor([prompt_ids] * n)
        finished = torch.zeros(n, dtype=torch.bool)
        tokens, logprobs, ranks = [], [], []
        for _ in range(max_tokens):
            logits = self.model(input_ids=sequences).logits[:, -1].float() / temperature
            token_logps = torch.log_softmax(logits.masked_fill(~truncation.kept(logits), float("-inf")), dim=-1)
            token = torch.multinomial(token_logps.exp(), 1, generator=self.generator)
            chosen = token_logps.gather(1, token)
            tokens.append(token.squeeze(1))
            logprobs.append(chosen.squeeze(1) + self.stand_in.offset(token.squeeze(1)))
            ranks.append((token_logps > chosen).sum(1) + 1)
            sequences = torch.cat([sequences, token], dim=1)
            finished |= torch.isin(token.squeeze(1), torch.tensor(sorted(self.eos_token_ids)))
            if finished.all():
                break
        completions = []
        for row in range(n):
            ids, scores = [], []
            for step in range(len(tokens)):
                ids.append(int(tokens[step][row]))
                scores.append((float(logprobs[step][row]), int(ranks[step][row])))
                if ids[-1] in self.eos_token_ids:
                    break
            completions.append((ids, scores))
        return completions


class LLM:
    """`vllm.LLM` in colocate mode."""

    def __init__(self, model: str, seed: int = 0, max_model_len: int | None = None, **engine_options):
        # TRL sets RANK, WORLD_SIZE, MASTER_ADDR, ... for vLLM's launcher; left set, the next Accelerator in this
        # process would start a one-process group. The stand-in needs none of them: they are put back.
        for name, value in _active.environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._engine = SamplingEngine(_active, model, seed)
        _active.engines.append(self._engine)
        runner = types.SimpleNamespace(model=self._engine)
        max_len = max_model_len or self._engine.model.config.max_position_embeddings
        self.llm_engine = types.SimpleNamespace(
            model_executor=types.SimpleNamespace(driver_worker=types.SimpleNamespace(model_runner=runner)),
            model_config=types.SimpleNamespace(max_model_len=max_len),
        )

    def generate(self, prompts, sampling_params: SamplingParams, use_tqdm: bool = False) -> list[RequestOutput]:
        _active.generate_calls += 1
        _active.detokenize.append(sampling_params.detokenize)
        outputs = []
        for index, prompt in enumerate(prompts):
            if "multi_modal_data" in prompt:
                raise NotImplementedError("the vLLM stand-in does not take images")
            prompt_ids = list(prompt["prompt_token_ids"])
            samples = self._engine.sample(
                prompt_ids, sampling_params.n, sampling_params.temperature, sampling_params.max_tokens,
                sampling_params.truncation,
            )
            completions = [
                CompletionOutput(
                    index=j,
                    token_ids=ids,
                    logprobs=None if sampling_params.logprobs is None
                    else [{token: Logprob(logprob, rank)} for token, (logprob, rank) in zip(ids, scores)],
                    finish_reason="stop" if ids[-1] in self._engine.eos_token_ids else "length",
                )
                for j, (ids, scores) in enumerate(samples)
            ]
            outputs.append(RequestOutput(str(index), prompt_ids, completions))
        return outputs

    def reset_prefix_cache(self):
        _active.weight_syncs += 1

    def sleep(self, level: int = 1):
        pass

    def wake_up(self, tags=None):
        pass


class VLLMClient:
    """TRL's `VLLMClient` talking to a vLLM server that serves `StandIn.server_model_path`."""

    def __init__(self, base_url: str | None = None, group_port: int = 51216, connection_timeout: float = 0.0, **_):
        self._engine = SamplingEngine(_active, _active.server_model_path, seed=0)
        _active.engines.append(self._engine)

    def init_communicator(self, device=0):
        pass

    def close_communicator(self):
        pass

    def get_server_info(self) -> dict:
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}

    def generate(self, prompts, features=None, n=1, repetition_penalty=1.0, temperature=1.0, top_p=1.0, top_k=0,
                 min_p=0.0, max_tokens=16, logprobs=0, structured_outputs_regex=None, generation_kwargs=None) -> dict:
        overrides = dict(generation_kwargs or {})  # the server merges them over the sampling parameters
        truncation = {"top_p": top_p, "top_k": top_k, "min_p": min_p}
        truncation.update({name: overrides.pop(name) for name in list(overrides) if name in truncation})
        if features is not None or structured_outputs_regex is not None or overrides:
            raise NotImplementedError(
                "the vLLM stand-in takes no images, structured outputs or generation_kwargs but top_p, top_k, min_p"
            )
        _check_no_penalty(repetition_penalty)
        _active.generate_calls += 1
        completion_ids, completion_logprobs, completion_token_ids = [], [], []
        for prompt_ids in prompts:
            samples = self._engine.sample(list(prompt_ids), n, temperature, max_tokens, Truncation(**truncation))
            for ids, scores in samples:
                completion_ids.append(ids)
                completion_logprobs.append([[logprob] for logprob, _ in scores])
                completion_token_ids.append([[token] for token in ids])
        return {
            "prompt_ids": [list(prompt_ids) for prompt_ids in prompts],
            "completion_ids": completion_ids,
            "logprobs": completion_logprobs if logprobs is not None else None,
            "logprob_token_ids": completion_token_ids if logprobs is not None else None,
        }

    def update_named_params(self, metadata, named_tensors):
        self._engine.load_weights(named_tensors)

    def update_named_param(self, name, weights):
        self._engine.load_weights([(name, weights)])

    def update_model_params(self, model):
        self._engine.load_weights(model.named_parameters())

    def reset_prefix_cache(self):
        _active.weight_syncs += 1


# ---------------------------------------------------------------------------------------------- installing it
@dataclass
class StandIn:
    """What the installed stand-in did, and its one knob."""

    server_model_path: str | None = None
    logprob_offset: float | Callable[[torch.Tensor], torch.Tensor] = 0.0
    engines: list[SamplingEngine] = field(default_factory=list)
    generate_calls: int = 0
    detokenize: list[bool] = field(default_factory=list)  # each colocated generate call's SamplingParams.detokenize
    weight_syncs: int = 0  # completed syncs (TRL resets the prefix cache once after each)
    loaded_tensors: int = 0
    environment: dict[str, str | None] = field(default_factory=dict)  # the launcher variables before TRL set them

    def offset(self, tokens: torch.Tensor) -> torch.Tensor | float:
        return self.logprob_offset(tokens) if callable(self.logprob_offset) else self.logprob_offset


_active = StandIn()


def install(monkeypatch, server_model_path: str | None = None, logprob_offset=0.0) -> StandIn:
    """Make TRL see vLLM (undone by `monkeypatch` at the end of the test); return the counters."""
    global _active
    import trl.generation.vllm_generation as vllm_generation

    _active = StandIn(server_model_path=server_model_path, logprob_offset=logprob_offset)
    package = types.ModuleType("vllm")
    package.__spec__ = importlib.machinery.ModuleSpec("vllm", loader=None, is_package=True)
    package.__version__ = VERSION
    package.LLM, package.SamplingParams, package.RequestOutput = LLM, SamplingParams, RequestOutput
    sampling_params = types.ModuleType("vllm.sampling_params")
    sampling_params.SamplingParams, sampling_params.StructuredOutputsParams = SamplingParams, StructuredOutputsParams
    package.sampling_params = sampling_params
    for name in LAUNCHER_VARIABLES:
        _active.environment[name] = os.environ.get(name)
    monkeypatch.setitem(sys.modules, "vllm", package)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sampling_params)
    for name, value in [("LLM", LLM), ("SamplingParams", SamplingParams), ("RequestOutput", RequestOutput),
                        ("StructuredOutputsParams", StructuredOutputsParams), ("VLLMClient", VLLMClient)]:
        monkeypatch.setattr(vllm_generation, name, value, raising=False)
    return _active
