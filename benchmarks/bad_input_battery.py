"""Bad-input battery: bad or hostile inputs against the tiny built-in setup, each classified.

Every case runs in a try-block in this process (CLI cases through `trl_zoo.cli.main`, which is what the
`trl-zoo` entry point calls) and is classified:

    clear   a one-line error naming the field, value or file (for the CLI: a non-zero exit status and one line, no
            traceback), or a warning naming it with a documented fallback, or a documented guarantee that held
    crash   an error from deep inside (a multi-line message, or one that names none of the case's fields; for the
            CLI, any exception escaping it, which a user sees as a traceback)
    silent  it ran without a word

    python benchmarks/bad_input_battery.py [--only NAME[,NAME...]] [--markdown PATH]

Prints one line per case while running and a Markdown table at the end (also written to --markdown).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

import trl_zoo  # noqa: E402
from benchmarks.lib.loss_hyperparameters import HYPERPARAMETERS  # noqa: E402
from trl_zoo.aggregation import AggregationContext  # noqa: E402
from trl_zoo.cli import main as cli_main  # noqa: E402
from trl_zoo.losses.base import PolicyBatch  # noqa: E402
from trl_zoo.registry import AGGREGATIONS, LOSSES  # noqa: E402
from trl_zoo.tasks.tiny import build_char_tokenizer, build_tiny_causal_lm  # noqa: E402

WORK = Path(tempfile.mkdtemp(prefix="trl_zoo_battery_"))
TOKENIZER = build_char_tokenizer()


def tiny_model(max_positions: int = 128):
    torch.manual_seed(0)
    return build_tiny_causal_lm(TOKENIZER, hidden_size=32, num_layers=2, num_heads=2, max_positions=max_positions)


MODEL_DIR = WORK / "tiny_model"
tiny_model().save_pretrained(MODEL_DIR)
TOKENIZER.save_pretrained(MODEL_DIR)


def prompts(n: int = 16) -> Dataset:
    return Dataset.from_dict({"prompt": [f"{a}+{a + 3}=" for a in range(10, 10 + n)]})


def digit_reward(completions, **kwargs):
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]  # conversational: the reply
    return [sum(ch.isdigit() for ch in text) / max(len(text), 1) for text in texts]


def config(**overrides) -> trl_zoo.GRPOConfig:
    kwargs = dict(
        output_dir=str(WORK / "run"), per_device_train_batch_size=8, num_generations=4, max_completion_length=8,
        learning_rate=1e-2, max_steps=1, logging_steps=1, report_to="none", bf16=False, use_cpu=True,
        save_strategy="no", seed=0, disable_tqdm=True,
    )
    kwargs.update(overrides)
    return trl_zoo.GRPOConfig(**kwargs)


def trainer(reward=digit_reward, dataset=None, model=None, processing_class=TOKENIZER, **overrides):
    return trl_zoo.GRPOTrainer(
        model=model if model is not None else str(MODEL_DIR),
        reward_funcs=reward,
        args=config(**overrides),
        train_dataset=dataset if dataset is not None else prompts(),
        processing_class=processing_class,
    )


def train(**kwargs):
    built = trainer(**kwargs)
    built.train()
    return built


class CliFailed(Exception):
    """The CLI exited non-zero with one line on stderr (its message is that line)."""


class CliCrashed(Exception):
    """An exception escaped the CLI: a user sees a traceback."""


def cli(*argv: str):
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            status = cli_main(list(argv))
    except Exception as error:
        raise CliCrashed(f"traceback: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
    lines = stderr.getvalue().strip().splitlines()
    if status != 0:
        if "Traceback" in stderr.getvalue():
            raise CliCrashed(f"exit {status} with a traceback")
        raise CliFailed(f"exit {status}: {lines[-1] if lines else '(nothing on stderr)'}")


def write_yaml(text: str) -> str:
    path = WORK / f"config_{abs(hash(text))}.yaml"
    path.write_text(text)
    return str(path)


TINY_CLI = ["--model_name_or_path", str(MODEL_DIR), "--max_steps", "1", "--per_device_train_batch_size", "8",
            "--num_generations", "4", "--max_completion_length", "6", "--write_report", "false"]


def sums_file() -> str:
    path = WORK / "sums.jsonl"
    rows = [{"prompt": f"{a}+{a + 3}=", "answer": str(2 * a + 3)} for a in range(10, 50)]
    path.write_text("\n".join(json.dumps(row) for row in rows))
    return str(path)


# --- checkpoints -----------------------------------------------------------------------------------------------


def saved_run(peft: bool) -> str:
    """A run with checkpoint-2 and checkpoint-4 (made once per kind, copied per case)."""
    out = WORK / ("saved_lora" if peft else "saved_full")
    if not out.exists():
        from peft import LoraConfig

        built = trl_zoo.GRPOTrainer(
            model=str(MODEL_DIR), reward_funcs=digit_reward, train_dataset=prompts(), processing_class=TOKENIZER,
            args=config(output_dir=str(out), max_steps=4, save_strategy="steps", save_steps=2),
            peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]) if peft else None,
        )
        built.train()
    return str(out)


def resume_with_truncated(name: str, peft: bool = False, via_cli: bool = False):
    source = saved_run(peft)
    target = WORK / f"truncated_{name}_{'cli' if via_cli else 'api'}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    path = target / "checkpoint-4" / name
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size // 2)
    if via_cli:
        cli("train", "--resume_from_checkpoint", "true", "--output_dir", str(target), *TINY_CLI)
        return
    from peft import LoraConfig

    built = trl_zoo.GRPOTrainer(
        model=str(MODEL_DIR), reward_funcs=digit_reward, train_dataset=prompts(), processing_class=TOKENIZER,
        args=config(output_dir=str(target), max_steps=6),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]) if peft else None,
    )
    built.train(resume_from_checkpoint=True)


def resume_half_written():
    target = WORK / "half_written"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(saved_run(False), target)
    (target / "checkpoint-4" / "trainer_state.json").unlink()
    built = trainer(output_dir=str(target), max_steps=5)
    built.train(resume_from_checkpoint=True)
    assert built.state.global_step == 5
    return "documented fallback held: resumed from checkpoint-2"


class InterruptAt(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 3:
            raise KeyboardInterrupt


def ctrl_c():
    built = trainer(output_dir=str(WORK / "ctrl_c"), max_steps=6, save_strategy="steps", save_steps=2)
    built.add_callback(InterruptAt())
    built.train()


# --- numerics --------------------------------------------------------------------------------------------------


def log_ratios_pm100():
    """Every registered loss (MoE-only ones aside) at log-ratios −100, 0, +100: finite loss and gradient."""
    mask = torch.ones(4, 5)
    generator = torch.Generator().manual_seed(0)
    log_ratio = 100.0 * (torch.randint(0, 3, mask.shape, generator=generator) - 1).float()
    bad = []
    for name in LOSSES.names():
        if LOSSES.get(name).spec.requires_moe:
            continue
        logps = (-5 * torch.rand(mask.shape, generator=generator)).requires_grad_()
        batch = PolicyBatch(logps, logps.detach() - log_ratio, torch.tensor([[1.5], [-2.0], [0.0], [0.7]]), mask,
                            ref_logps=logps.detach() + log_ratio)
        args = config(loss_type=name, max_completion_length=5)
        term = LOSSES.get(name).fn(batch, args)
        aggregate = AGGREGATIONS.get(LOSSES.get(name).spec.aggregation).fn
        loss, _ = aggregate(term.loss, mask, AggregationContext(max_completion_length=5))
        (gradient,) = torch.autograd.grad(loss, logps, allow_unused=True)
        if not torch.isfinite(loss) or (gradient is not None and not torch.isfinite(gradient).all()):
            bad.append(name)
    if bad:
        return None  # silent: non-finite values without a word
    return "documented guarantee held: every loss finite at ±100 (ratio capped)"


def nan_weight_policy():
    model = tiny_model()
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight[0, 0] = float("nan")
    train(model=model, max_steps=2)


def epsilon_zero_off_policy():
    train(epsilon=0.0, num_iterations=2, max_steps=2)


def constant_reward(value):
    def reward(completions, **kwargs):
        return [value] * len(completions)

    return reward


def none_reward(completions, **kwargs):
    return [None] * len(completions)


# --- the cases -------------------------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    group: str
    run: callable
    names: tuple[str, ...]  # a clear message names one of these
    expected_silent: bool = field(default=False)


# --- wider classes: values in used columns, dotted-path objects, loss hyperparameters, small streams, ±100 ----------


def prompts_with(bad, row: int = 3, n: int = 16) -> Dataset:
    """`prompts(n)` with row `row`'s prompt replaced by `bad` (a whole column of `bad` when row is None)."""
    values = [f"{a}+{a + 3}=" for a in range(10, 10 + n)]
    values = [bad] * n if row is None else values[:row] + [bad] + values[row + 1:]
    return Dataset.from_dict({"prompt": values})


def train_long(dataset, steps: int = 8, **kwargs):
    """Train long enough that every row is drawn (16 rows, 2 per step)."""
    return train(dataset=dataset, max_steps=steps, **kwargs)


def chat_tokenizer():
    """The battery's tokenizer with a minimal chat template, for conversational prompts."""
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}{{ m.role[0] }}:{{ m.content }} {% endfor %}a:"
    return tokenizer


def messages_with(bad) -> Dataset:
    good = [{"role": "user", "content": "1+1="}]
    return Dataset.from_dict({"prompt": [good] * 3 + [bad] + [good] * 12})


def sums_file_with(name: str, row: dict) -> str:
    """The 40 sums of `sums_file`, row 3 replaced by `row`."""
    path = WORK / f"sums_{name}.jsonl"
    rows = [{"prompt": f"{a}+{a + 3}=", "answer": str(2 * a + 3)} for a in range(10, 50)]
    rows[3] = row
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return str(path)


REWARD_MODULE = "battery_reward_objects"
(WORK / f"{REWARD_MODULE}.py").write_text(
    "NAME = 'exact_match'\nNUMBER = 3\nNOTHING = None\nLISTED = [len]\n"
    "class RewardClass:\n    def __init__(self, scale):\n        self.scale = scale\n"
    "def make_reward(scale):\n    return lambda completions, **kwargs: [scale] * len(completions)\n"
)
(WORK / "battery_broken_module.py").write_text("raise RuntimeError('this module fails on import')\n")
sys.path.insert(0, str(WORK))


def cli_reward(path: str, name: str):
    cli("train", "--dataset_name", sums_file(), "--reward_funcs", path, *TINY_CLI, "--output_dir", str(WORK / name))


DOTTED_PATHS = {  # kind: (path, what a clear message names: the path, or what the object is)
    "a string": (f"{REWARD_MODULE}.NAME", f"{REWARD_MODULE}.NAME"),
    "a number": (f"{REWARD_MODULE}.NUMBER", f"{REWARD_MODULE}.NUMBER"),
    "None": (f"{REWARD_MODULE}.NOTHING", f"{REWARD_MODULE}.NOTHING"),
    "a list": (f"{REWARD_MODULE}.LISTED", f"{REWARD_MODULE}.LISTED"),
    "a module": ("os.path", "os.path"),
    "a class": (f"{REWARD_MODULE}.RewardClass", "a class"),
    "a reward factory": (f"{REWARD_MODULE}.make_reward", "factory"),
    "a module that raises on import": ("battery_broken_module.reward", "battery_broken_module.reward"),
    "an empty module name": (".reward", ".reward"),
}

SIGNED = {"clip_cov_lower", "clip_cov_upper"}  # a covariance window may lie below 0
CLIP_RANGES = {"epsilon_high", "delta", "dual_clip", "gmpo_epsilon"}  # also tried at 1e12, beyond any capped ratio


def hyperparameter_cases() -> list:
    cases = []
    for name, loss in HYPERPARAMETERS.items():
        values = [math.nan, math.inf] + ([] if name in SIGNED else [-1.0]) + ([1e12] if name in CLIP_RANGES else [])
        for value in values:
            cases.append(Case(f"{loss} {name}={value:g}", "hyperparameters",
                              lambda name=name, loss=loss, value=value: config(loss_type=loss, **{name: value}),
                              (name,)))
    return cases


def small_stream(sampler):
    """One prompt in a stream, for a generation batch of two prompts: TRL's loop would end at step 0."""
    built = train(dataset=prompts(1).to_iterable_dataset(), dynamic_sampling=sampler, max_steps=2)
    if built.state.global_step == 0:
        return None  # silent: no step and no error
    return f"documented fallback held: {built.state.global_step} steps"


def one_token_rows_pm100(name):
    """Loss `name` at log-ratios ±100 on one-token completions (T_i = 1: nothing averages δ down), both signs of Â,
    sequence and token advantages, with its hyperparameters at defaults and at the widest accepted clip."""
    mask = torch.tensor([[1, 0, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.float)
    log_ratio = torch.tensor([[100.0, 0, 0], [100.0, 0, 0], [-100.0, 100.0, 100.0], [-100.0, 0, 0]])
    wide = {"gmpo": dict(gmpo_epsilon=1e3), "dapo": dict(epsilon_high=1e3), "cispo": dict(epsilon_high=1e3)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the wide clip warns; what is checked here is the arithmetic
        settings = [config(loss_type=name, max_completion_length=3)]
        settings += [config(loss_type=name, max_completion_length=3, **wide[name])] if name in wide else []
    for args in settings:
        for advantages in (torch.tensor([[1.5], [-2.0], [-1.0], [0.7]]), torch.tensor([[-1.5], [2.0], [1.0], [-0.7]])):
            for token_level in (False, True):
                logps = (-2 * torch.ones(mask.shape)).requires_grad_()
                adv = advantages.expand_as(mask).clone() if token_level else advantages
                batch = PolicyBatch(logps, logps.detach() - log_ratio, adv, mask, ref_logps=logps.detach() + log_ratio)
                term = LOSSES.get(name).fn(batch, args)
                aggregate = AGGREGATIONS.get(LOSSES.get(name).spec.aggregation).fn
                loss, _ = aggregate(term.loss, mask, AggregationContext(max_completion_length=3))
                (gradient,) = torch.autograd.grad(loss, logps, allow_unused=True)
                if not torch.isfinite(loss) or (gradient is not None and not torch.isfinite(gradient).all()):
                    return None  # silent: a non-finite loss or gradient without a word
    return "documented guarantee held: finite loss and gradient"


WIDER_CASES = [
    # None / empty / non-string values in a used column
    Case("prompt None in row 3", "values", lambda: train_long(prompts_with(None)), ("row 3",)),
    Case("prompt empty string in row 3", "values", lambda: train_long(prompts_with("")), ("row 3",)),
    Case("prompt whitespace in row 3", "values", lambda: train_long(prompts_with("   ")), ("row 3",)),
    Case("prompt an integer (whole column)", "values", lambda: train_long(prompts_with(7, row=None)), ("row 0",)),
    Case("prompt an empty message list in row 3", "values",
         lambda: train_long(messages_with([]), processing_class=chat_tokenizer()), ("row 3",)),
    Case("prompt message content None in row 3", "values",
         lambda: train_long(messages_with([{"role": "user", "content": None}]), processing_class=chat_tokenizer()),
         ("row 3",)),
    Case("prompt None in a streamed dataset", "values",
         lambda: train_long(prompts_with(None).to_iterable_dataset()), ("prompt",)),
    Case("CLI: prompt null in row 3 of a file", "values",
         lambda: cli("train", "--dataset_name", sums_file_with("prompt_null", {"prompt": None, "answer": "1"}),
                     *TINY_CLI, "--output_dir", str(WORK / "v1")), ("row 3",)),
    Case("CLI: answer null in row 3 (exact_match reads it)", "values",
         lambda: cli("train", "--dataset_name", sums_file_with("answer_null", {"prompt": "1+2=", "answer": None}),
                     *TINY_CLI, "--output_dir", str(WORK / "v2")), ("row 3",)),
    Case("CLI: prompt empty in row 3 of a file", "values",
         lambda: cli("train", "--dataset_name", sums_file_with("prompt_empty", {"prompt": "", "answer": "1"}),
                     *TINY_CLI, "--output_dir", str(WORK / "v3")), ("row 3",)),
    # every kind of wrong object behind a dotted reward path
    *[
        Case(f"CLI: --reward_funcs dotted path to {kind}", "dotted paths",
             lambda path=path, kind=kind: cli_reward(path, "d_" + kind.replace(" ", "_")), (named,))
        for kind, (path, named) in DOTTED_PATHS.items()
    ],
    # every loss hyperparameter at absurd values
    *hyperparameter_cases(),
    # every sampler over a stream smaller than one generation batch
    *[
        Case(f"{sampler or 'no sampler'} over a 1-prompt stream", "samplers",
             lambda sampler=sampler: small_stream(sampler), ("train_dataset", "dynamic_sampling"))
        for sampler in (None, "resample", "reweight", "greso")
    ],
    # every loss at log-ratios ±100 on one-token rows
    *[
        Case(f"{name} at log-ratios ±100, one-token rows", "numerics", lambda name=name: one_token_rows_pm100(name),
             ("",))
        for name in LOSSES.names() if not LOSSES.get(name).spec.requires_moe
    ],
]


def prompt_too_long():
    long = Dataset.from_dict({"prompt": ["1+2=" * 10] * 16})
    train(dataset=long, model=tiny_model(max_positions=32))


CASES = [
    # configuration
    Case("unknown loss_type", "config", lambda: config(loss_type="grpoo"), ("loss_type",)),
    Case("negative learning_rate", "config", lambda: train(learning_rate=-1e-3), ("learning_rate",)),
    Case("beta < 0", "config", lambda: config(beta=-0.1), ("beta",)),
    Case("temperature = 0", "config", lambda: train(temperature=0.0), ("temperature",)),
    Case("top_p > 1", "config", lambda: train(top_p=1.5), ("top_p",)),
    Case("max_completion_length = 0", "config", lambda: config(max_completion_length=0), ("max_completion_length",)),
    Case("num_generations = 1", "config", lambda: config(num_generations=1), ("num_generations",)),
    Case("generation batch not divisible by num_generations", "config",
         lambda: config(per_device_train_batch_size=6, num_generations=4),
         ("generation_batch_size", "num_generations")),
    Case("dapo epsilon_high < epsilon", "config", lambda: config(loss_type="dapo", epsilon=0.2, epsilon_high=0.1),
         ("epsilon_high",)),
    Case("sapo temperature_neg < temperature_pos", "config",
         lambda: config(loss_type="sapo", sapo_temperature_neg=0.5, sapo_temperature_pos=1.0),
         ("sapo_temperature_neg", "sapo_temperature_pos")),
    Case("epsilon = 0 off-policy (num_iterations 2)", "config", epsilon_zero_off_policy, ("epsilon",)),
    Case("fp16 on CPU", "config", lambda: config(fp16=True), ("fp16",)),
    Case("unknown advantage_estimator", "config", lambda: config(advantage_estimator="gae2"),
         ("advantage_estimator",)),
    # data
    Case("empty dataset", "data", lambda: trainer(dataset=Dataset.from_dict({"prompt": []})), ("train_dataset",)),
    Case("missing prompt column", "data", lambda: trainer(dataset=Dataset.from_dict({"question": ["1+2="] * 16})),
         ("prompt",)),
    Case("resample with too-small dataset", "data",
         lambda: trainer(dataset=prompts(1), dynamic_sampling="resample"), ("dynamic_sampling",)),
    Case("prompt + completion > max_position_embeddings", "data", prompt_too_long, ("max_position_embeddings",)),
    Case("beta > 0 with a model built in memory", "data", lambda: train(model=tiny_model(), beta=0.1), ("beta",)),
    Case("model in memory without processing_class", "data",
         lambda: trainer(model=tiny_model(), processing_class=None), ("processing_class",)),
    # rewards
    Case("reward returns a scalar", "rewards", lambda: train(reward=lambda completions, **kw: 1.0), ("reward",)),
    Case("reward returns strings", "rewards", lambda: train(reward=lambda completions, **kw: ["1"] * len(completions)),
         ("reward",)),
    Case("reward returns None for every completion", "rewards", lambda: train(reward=none_reward), ("none_reward",)),
    Case("non-callable reward", "rewards", lambda: trainer(reward=42), ("reward_funcs",)),
    Case("rewards 1e30", "rewards", lambda: train(reward=constant_reward(1e30)), ("reward",)),
    Case("NaN rewards", "rewards", lambda: train(reward=constant_reward(math.nan)), ("reward",)),
    Case("reward returns the wrong count", "rewards", lambda: train(reward=lambda completions, **kw: [0.0]),
         ("reward",)),
    # numerics
    Case("log-ratios ±100 in every loss", "numerics", log_ratios_pm100, ("",)),
    Case("learning_rate = NaN", "numerics", lambda: config(learning_rate=float("nan")), ("learning_rate",)),
    Case("policy weights hold a NaN", "numerics", nan_weight_policy, ("model",)),
    # faults and resume
    *[
        Case(f"truncated {name}", "resume", lambda name=name: resume_with_truncated(name), (name,))
        for name in ("trl_zoo_state.pt", "model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth",
                     "trainer_state.json", "training_args.bin")
    ],
    Case("truncated adapter_model.safetensors (LoRA)", "resume",
         lambda: resume_with_truncated("adapter_model.safetensors", peft=True), ("adapter_model.safetensors",)),
    Case("half-written checkpoint (resume from last)", "resume", resume_half_written, ("checkpoint",)),
    Case("resume_from_checkpoint: no such folder", "resume",
         lambda: trainer().train(resume_from_checkpoint=str(WORK / "nowhere")), ("nowhere",)),
    Case("Ctrl-C in trainer.train()", "resume", ctrl_c, ("interrupted at step",)),
    # CLI
    Case("CLI: misspelt YAML key", "cli",
         lambda: cli("train", "--config", write_yaml("lerning_rate: 0.1\n"), *TINY_CLI), ("lerning_rate",)),
    Case("CLI: wrong type in YAML", "cli",
         lambda: cli("train", "--config", write_yaml("learning_rate: fast\n"), *TINY_CLI), ("learning_rate",)),
    Case("CLI: misspelt flag", "cli", lambda: cli("train", "--num_generation", "4"), ("num_generation",)),
    Case("CLI: unknown reward name", "cli",
         lambda: cli("train", "--reward_funcs", "exact_matchh", *TINY_CLI, "--output_dir", str(WORK / "c1")),
         ("reward_funcs",)),
    Case("CLI: reward dotted path that does not import", "cli",
         lambda: cli("train", "--reward_funcs", "nosuchmodule.reward", *TINY_CLI, "--output_dir", str(WORK / "c2")),
         ("reward_funcs",)),
    Case("CLI: truncated optimizer.pt, --resume_from_checkpoint true", "cli",
         lambda: resume_with_truncated("optimizer.pt", via_cli=True), ("optimizer.pt",)),
    Case("CLI: dataset file missing", "cli",
         lambda: cli("train", "--dataset_name", str(WORK / "missing.jsonl"), *TINY_CLI), ("dataset_name",)),
    Case("CLI: prompt column missing", "cli",
         lambda: cli("train", "--dataset_name", sums_file(), "--prompt_column", "question", *TINY_CLI,
                     "--output_dir", str(WORK / "c3")), ("prompt_column",)),
]


CASES += WIDER_CASES


def classify(case: Case) -> tuple[str, str]:
    stderr = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(stderr):
        warnings.simplefilter("always")
        try:
            note = case.run()
        except BaseException as error:  # KeyboardInterrupt included: it is a case
            if isinstance(error, CliCrashed):
                return "crash", str(error)
            message = str(error) or (stderr.getvalue().strip().splitlines() or [""])[-1]
            if isinstance(error, CliFailed):
                message = message.split(": ", 1)[1]
            one_line = "\n" not in message.strip()
            named = any(name in message for name in case.names)
            deep = traceback.extract_tb(error.__traceback__)[-1]
            where = f" [{type(error).__name__} at {Path(deep.filename).name}:{deep.lineno}]"
            if one_line and named and not isinstance(error, (RuntimeError, IndexError, KeyError, AttributeError)):
                return "clear", message.strip()
            return "crash", message.strip().splitlines()[0][:200] + where if message.strip() else where
    if isinstance(note, str):
        return "clear", note
    ours = [str(w.message) for w in caught if any(name in str(w.message) for name in case.names)]
    if ours:
        return "clear", "warning: " + ours[0].splitlines()[0]
    return "silent", "ran without an error or a warning naming " + " / ".join(case.names)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None, help="comma-separated case names (substrings)")
    parser.add_argument("--markdown", default=None, help="also write the table to this file")
    options = parser.parse_args(argv)
    torch.set_num_threads(1)
    cases = CASES
    if options.only:
        wanted = options.only.split(",")
        cases = [case for case in CASES if any(w in case.name for w in wanted)]
    rows = []
    for case in cases:
        started = time.perf_counter()
        verdict, detail = classify(case)
        seconds = time.perf_counter() - started
        rows.append((case.group, case.name, verdict, detail))
        print(f"{verdict:<6} {seconds:5.1f}s  {case.group:<8} {case.name}: {detail[:160]}", flush=True)
    counts = {verdict: sum(row[2] == verdict for row in rows) for verdict in ("clear", "crash", "silent")}
    table = ["| group | case | result | what the user sees |", "| --- | --- | --- | --- |"]
    for group, name, verdict, detail in rows:
        table.append(f"| {group} | {name} | {verdict} | {detail.replace('|', '/')} |")
    table.append("")
    table.append(f"{len(rows)} cases: {counts['clear']} clear, {counts['crash']} crash, {counts['silent']} silent.")
    text = "\n".join(table)
    print()
    print(text)
    if options.markdown:
        Path(options.markdown).write_text(text + "\n")
    shutil.rmtree(WORK, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
