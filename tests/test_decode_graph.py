"""compile_generation_backend="cuda_graph": transformers' decode step goes through trl_zoo's `GraphedDecodeStep`
(eager on a CPU, so the field works in every test), and on a GPU the replayed graph decodes what the eager step
decodes, captures once per `generate` call, keeps no memory after `generate` returns and sees weights changed in
place between calls."""

from __future__ import annotations

import warnings

import pytest
import torch
from peft import LoraConfig
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from tests import tiny
from trl_zoo import GRPOConfig, GRPOTrainer
from trl_zoo.components import decode_graph

NEW_TOKENS = 12


def test_a_trainer_with_the_backend_decodes_through_the_step_on_a_cpu():
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    trainer = tiny.make_trainer(GRPOTrainer, GRPOConfig, peft_config=lora, speed_recipe="lora_graphed", max_steps=1,
                                per_device_train_batch_size=8, gradient_accumulation_steps=1)
    step = trainer.pipeline.get("generation_speed").graphed_decoding
    target = decode_graph.decoding_model(trainer.accelerator.unwrap_model(trainer.model))
    assert target is not trainer.model and target.get_compiled_call(None) is step
    assert trainer.generation_config.cache_implementation == "static" and not trainer.generation_config.disable_compile
    result = trainer.train()
    # every decode step after the prefill (max_completion_length 8: 7 a generate call) ran through the step, eagerly
    assert step.eager_steps >= 7 and step.eager_steps % 7 == 0
    assert step.captures == step.replays == 0 and not step.holds_a_graph
    # every decode step of a generate call has the key of the first (on a GPU: one capture, then replays); the
    # masks arrive as a new dict each step, which must not count as a new key
    assert step.keys == step.eager_steps // 7
    assert torch.isfinite(torch.tensor(result.training_loss))


def tiny_llama(device):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    return LlamaForCausalLM(config).to(device).eval()


def generated(model, prompts, compiled: bool):
    config = GenerationConfig(do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                              cache_implementation="static", disable_compile=not compiled, pad_token_id=0,
                              eos_token_id=1, output_scores=True, return_dict_in_generate=True)
    with torch.no_grad():
        out = model.generate(input_ids=prompts, attention_mask=(prompts != 0).long(), generation_config=config)
    return out.sequences, torch.stack(out.scores)


def assert_same_greedy_decoding(graphed, eager, tolerance=1e-4):
    """The same scores within `tolerance` and the same tokens, step by step, for as long as the two decodings are fed
    the same tokens: wherever eager's best score leads the second by more than twice the tolerance the tokens must
    agree; after a nearer tie (which may flip under rounding) a row's later steps see other inputs and are not
    compared."""
    (tokens, scores), (eager_tokens, eager_scores) = graphed, eager
    top2 = eager_scores.topk(2, dim=-1).values  # (steps, rows, 2)
    clear = (top2[..., 0] - top2[..., 1] > 2 * tolerance).T  # (rows, steps)
    assert clear.float().mean() > 0.9  # near ties are rare: the check compares most tokens
    # a step's inputs are the same in both decodings when every earlier step of its row was clear
    same_inputs = torch.ones_like(clear)
    same_inputs[:, 1:] = clear[:, :-1].int().cumprod(dim=1).bool()
    torch.testing.assert_close(scores.transpose(0, 1)[same_inputs], eager_scores.transpose(0, 1)[same_inputs],
                               rtol=tolerance, atol=tolerance)
    compared = same_inputs & clear
    new = tokens.shape[1] - clear.shape[1]
    assert torch.equal(tokens[:, new:][compared], eager_tokens[:, new:][compared])
    assert torch.equal(tokens[:, :new], eager_tokens[:, :new])  # the prompts, copied


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_the_replayed_graph_decodes_as_the_eager_step_on_a_gpu():
    model = tiny_llama("cuda")
    prompts = torch.tensor([[0, 0, 5, 6, 7], [3, 4, 5, 6, 8], [0, 9, 10, 11, 12]], device="cuda")
    eager_tokens, eager_scores = generated(model, prompts, compiled=False)
    step = decode_graph.install(model)
    graph_tokens, graph_scores = generated(model, prompts, compiled=True)
    assert step.disabled_because is None
    # NEW_TOKENS - 1 decode steps after the prefill: the first eager (warm-up), the second captured, all replayed
    assert (step.eager_steps, step.captures, step.replays) == (1, 1, NEW_TOKENS - 2)
    assert not step.holds_a_graph  # released when generate returned: no decoding memory kept for the loss step
    assert_same_greedy_decoding((graph_tokens, graph_scores), (eager_tokens, eager_scores))

    with torch.no_grad():  # an optimizer-like update in place: the next generate call must decode with it
        model.model.layers[1].mlp.down_proj.weight.mul_(-3.0)
    generated(model, prompts, compiled=True)  # the first calls allocate what stays (the side stream's workspace)
    free_before = torch.cuda.memory_allocated()
    step_graph = generated(model, prompts, compiled=True)
    assert torch.cuda.memory_allocated() <= free_before + (step_graph[0].numel() + step_graph[1].numel()) * 8
    for _ in range(3):  # nothing grows from one generate call to the next (one side stream, one cuBLAS workspace)
        generated(model, prompts, compiled=True)
    assert torch.cuda.memory_allocated() <= free_before + (step_graph[0].numel() + step_graph[1].numel()) * 8
    assert step.captures == 6 and step.replays == 6 * (NEW_TOKENS - 2)
    eager_after = generated(model, prompts, compiled=False)
    assert not torch.allclose(eager_after[1], eager_scores, atol=1e-3)
    assert_same_greedy_decoding(step_graph, eager_after)


def test_a_capture_is_keyed_by_the_shapes_inside_a_mask_dict_not_by_the_dict():
    """transformers 5 passes a model with several attention types (Qwen2, Gemma 3) a new dict of masks every decode
    step: two such dicts of same-shaped tensors are one key, and a replay copies the new masks into the buffers."""
    first = {"full_attention": torch.zeros(2, 1, 1, 6), "sliding_attention": torch.ones(2, 1, 1, 6)}
    second = {name: mask + 5 for name, mask in first.items()}
    assert decode_graph._key_part(first) == decode_graph._key_part(second)
    assert decode_graph._key_part(first) != decode_graph._key_part({"full_attention": torch.zeros(2, 1, 1, 7)})
    buffers = decode_graph._static_copy(first)
    assert all(buffers[name] is not first[name] for name in first)
    decode_graph._copy_into(buffers, second)
    for name in first:
        torch.testing.assert_close(buffers[name], second[name], rtol=0, atol=0)


def test_a_generate_call_that_never_replays_warns_once():
    """On a GPU a generate call whose every decode step is a new key warms up again and again and replays nothing:
    one warning a run says so, instead of decoding eagerly without a word."""
    step = decode_graph.GraphedDecodeStep(torch.nn.Identity())
    with pytest.warns(UserWarning, match="replayed no decode step from a CUDA graph"):
        step.warn_if_never_replayed(warm_ups=7, replays=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step.warn_if_never_replayed(warm_ups=7, replays=0)  # once a run
        decode_graph.GraphedDecodeStep(torch.nn.Identity()).warn_if_never_replayed(warm_ups=1, replays=6)
