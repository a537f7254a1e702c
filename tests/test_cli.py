"""`trl-zoo` end to end: train on the built-in task and on local data, list, compare, and bad configuration."""

import csv
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from peft import PeftModel
from PIL import Image
from transformers import AutoModelForCausalLM, AutoTokenizer

import trl_zoo.cli.train.heldout_accuracy
import trl_zoo.cli.train.training_setup
from trl_zoo import LOSSES, TABLES
from trl_zoo.cli import COMMANDS, main
from trl_zoo.cli.arguments.train_arguments import TaskArguments, make_train_parser, parse_train_args
from trl_zoo.cli.arguments.train_help import (
    GROUP_ORDER,
    TRL_MODEL_GROUP,
    TRL_SCRIPT_GROUP,
    TRL_TRAINING_GROUP,
    own_fields,
)
from trl_zoo.cli.report.report import write_report
from trl_zoo.cli.report.run_log import Run
from trl_zoo.cli.rewards.reward_names import REWARDS
from trl_zoo.cli.train.resume_checkpoint import resume_checkpoint
from trl_zoo.config import GRPOConfig
from trl_zoo.tasks import ADDITION
from trl_zoo.tasks.evaluation import greedy_accuracy, greedy_evaluation

from . import tiny

ROOT = Path(__file__).resolve().parent.parent
TINY_BOOTSTRAP = ["--bootstrap_max_steps", "8", "--bootstrap_hidden_size", "32", "--bootstrap_num_layers", "2"]
TINY_RL = [
    "--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations", "4",
    "--eval_every_steps", "1", "--logging_steps", "1",
]


@pytest.fixture(autouse=True)
def shared_cache(tmp_path_factory, monkeypatch):
    """One bootstrap cache for the whole session (subprocesses inherit it through the environment)."""
    monkeypatch.setenv("TRL_ZOO_CACHE", str(tmp_path_factory.getbasetemp() / "trl_zoo_cache"))


def read_records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def heldout_accuracy(model, tokenizer, reward) -> float:
    """The CLI's held-out accuracy, in the CLI's batches: the same shapes, so the same logits to the last bit."""
    heldout = ADDITION.heldout_dataset()
    return greedy_accuracy(
        model, tokenizer, heldout["prompt"], ADDITION.max_completion_length, reward=reward,
        reward_kwargs={"answer": heldout["answer"]}, batch_size=TaskArguments().eval_batch_size,
    )


# ------------------------------------------------------------------------------------------------------ list
def test_list_shows_every_plugin_with_description_and_source(capsys):
    assert main(["list"]) == 0
    sections = {}
    for block in capsys.readouterr().out.strip().split("\n\n"):
        header, *rows = block.splitlines()
        sections[header] = rows
    assert list(sections)[:len(TABLES)] == [f"{name} ({len(table.names())})" for name, table in TABLES.items()]
    for (header, rows), table in zip(sections.items(), TABLES.values()):
        entry_rows = [row for row in rows if not row.split()[0].startswith("--")]
        assert [row.split()[0] for row in entry_rows] == table.names()
        for row, entry in zip(entry_rows, table.entries()):
            assert entry.description in row and entry.source in row
            fields = getattr(entry.spec, "fields", ())
            below = rows[rows.index(row) + 1:][:len(fields)]
            assert [line.split()[:2] for line in below] == [[f"--{f.name}", str(f.default)] for f in fields]


def test_list_shows_the_reward_functions_and_reward_shaping_after_the_tables(capsys):
    assert main(["list"]) == 0
    blocks = [block.splitlines() for block in capsys.readouterr().out.strip().split("\n\n")]
    sections = {header: rows for header, *rows in blocks}
    assert list(sections)[len(TABLES):] == ["reward functions (4, --reward_funcs)", "reward shaping (3)"]
    functions = sections["reward functions (4, --reward_funcs)"]
    assert [row.split()[0] for row in functions[:-1]] == list(REWARDS)  # every name --reward_funcs takes of trl_zoo's
    assert "label-free" in functions[3] and functions[-1].startswith("  also: a name in TRL's reward registry")
    flags = [row.split()[0] for row in sections["reward shaping (3)"]]
    assert flags == ["--overlong_buffer_length", "--truncation_penalty", "--mask_truncated_completions"]
    assert {flag[2:] for flag in flags} <= {field.name for field in dataclasses.fields(GRPOConfig)}


def test_compare_help_says_trains_flags_apply(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Every other flag is a `trl-zoo train` flag (`trl-zoo train --help` lists them" in out


def test_list_shows_a_plugins_fields_with_default_and_range(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "--m2po_threshold 0.04  (float, > 0)" in out
    assert sum(
        len(getattr(entry.spec, "fields", ())) for table in TABLES.values() for entry in table.entries()
    ) == out.count("\n      ")


def test_dppo_is_not_called_prime_rls_default_loss(capsys):
    """prime-rl removed DPPO in 2026-08 (its default is now IPO): `list` and every text of the project that names
    prime-rl's default say so, in the past."""
    assert main(["list"]) == 0
    (dppo,) = [line for line in capsys.readouterr().out.splitlines() if line.split()[:1] == ["dppo"]]
    assert dppo.endswith("[DPPO, arXiv:2602.04879; prime-rl's default loss until 2026-08]")
    texts = [*(ROOT / "trl_zoo").rglob("*.py"), *(ROOT / "docs").glob("*.md"), ROOT / "README.md",
             *(ROOT / "configs").glob("*.yaml")]
    for path in texts:
        text = " ".join(path.read_text().split())  # a phrase across a line break
        for match in re.finditer(r"prime-rl's default", text):
            assert text[match.end():].startswith((" loss until 2026-08", " is now IPO")), path


# ------------------------------------------------------------------------------------------------------ help
def test_help_points_to_the_commands_and_version_prints_the_project_version(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"trl-zoo {command} " in out for command in COMMANDS) and "trl-zoo COMMAND --help" in out
    assert main(["--version"]) == 0
    version = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE).group(1)
    assert capsys.readouterr().out.startswith(f"trl-zoo {version} (trl ")
    assert main(["list", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: trl-zoo list\n\nEvery plugin table")


def test_train_help_lists_trl_zoos_losses(capsys):
    with pytest.raises(SystemExit) as exited:  # argparse prints the help and exits
        main(["train", "--help"])
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--loss_type LOSS_TYPE, --loss-type LOSS_TYPE Policy loss, a name in trl_zoo's loss table: " in out
    assert ", ".join(LOSSES.names()) in out and "Supported values are 'grpo'" not in out


SPEED_FIGURE = re.compile(r"\d\.\d+\s?[x×]|~\s?\d+\s?[x×]|\d\s?(?:s|ms|GiB|MiB)\b|\bH[12]00\b")


def test_speed_figures_are_written_once_in_the_benchmarks_page(capsys):
    """A measured speed lives in docs/benchmarks.md: `train --help` quotes none (its lora_graphed said 0.53× where
    the page said 0.44×) and points there, and no docstring repeats a time against TRL's or eager decoding."""
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert SPEED_FIGURE.findall(out) == []
    assert ("Each one's time against TRL's: docs/benchmarks.md, 'Time to a target' (the lora recipes) and "
            "docs/vllm.md") in out
    against = re.compile(r"\d\.\d+\s?[x×]\s(?:TRL|eager)")
    sources = (ROOT / "trl_zoo").rglob("*.py")
    assert [path.name for path in sources if against.search(" ".join(path.read_text().split()))] == []


def test_train_help_shows_trl_zoos_fields_first_in_groups_then_trls(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    sections, title = {}, None
    for line in capsys.readouterr().out.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
            sections[title] = []
        elif title and line.startswith("  --"):
            sections[title].append(line.split()[0].rstrip(","))
    assert list(sections) == ["options", *GROUP_ORDER]
    flags = [flag for flags in sections.values() for flag in flags]
    parser = make_train_parser()
    every = {f"--{action.dest}" for action in parser._actions if action.dest != "help"}
    assert len(flags) == len(set(flags)) and every <= set(flags)  # every field shown once: TRL's stay reachable
    ours = [*own_fields(GRPOConfig), *own_fields(TaskArguments)]
    trl_zoo_flags = {flag for title, group in sections.items() if title.startswith("trl_zoo: ") for flag in group}
    assert trl_zoo_flags == {f"--{prefix}{name}" for name in ours for prefix in ("", "no_")} & set(flags)
    assert {f"--{name}" for name in ours} <= trl_zoo_flags
    expected = {"--loss_type": "trl_zoo: loss", "--kl_estimator": "trl_zoo: advantages and KL",
                "--dynamic_sampling": "trl_zoo: sampling and reward shaping",
                "--skip_zero_advantage": "trl_zoo: compute and numerics", "--num_heldout": "trl_zoo: task and data",
                "--datasets": TRL_SCRIPT_GROUP, "--reward_model_name_or_path": TRL_SCRIPT_GROUP,
                "--lora_r": TRL_MODEL_GROUP, "--learning_rate": TRL_TRAINING_GROUP,
                "--trust_remote_code": TRL_TRAINING_GROUP}
    assert {flag: next(t for t, group in sections.items() if flag in group) for flag in expected} == expected


# ------------------------------------------------------------------------------------------------------ train
def test_train_builtin_task_end_to_end(tmp_path, capsys):
    # A barely bootstrapped policy never gets a sum right, so exact match would give no signal; the fraction of
    # digits does, and "accuracy" is then the share of all-digit greedy completions.
    out = tmp_path / "run"
    argv = ["train", *TINY_BOOTSTRAP, *TINY_RL, "--loss_type", "grpo", "--reward_funcs", "tests.tiny.digit_reward",
            "--output_dir", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["loss_type"] == "grpo" and summary["task"] == "addition"

    records = read_records(out)
    evals = [(r["step"], r["heldout_accuracy"]) for r in records if r["kind"] == "eval"]
    assert [step for step, _ in evals] == [0, 1, 2]  # before RL, then every step
    assert sorted(r["step"] for r in records if r["kind"] == "train") == [1, 2]
    assert all("reward" in r and "entropy" in r for r in records if r["kind"] == "train")

    # The reported numbers are the held-out accuracy of the base model and of base + saved adapter.
    tokenizer = AutoTokenizer.from_pretrained(summary["model"])
    base = AutoModelForCausalLM.from_pretrained(summary["model"])
    assert summary["accuracy_before"] == evals[0][1] == heldout_accuracy(base, tokenizer, tiny.digit_reward)
    adapted = PeftModel.from_pretrained(base, out)
    lora_b = [p for name, p in adapted.named_parameters() if "lora_B" in name]
    assert lora_b and any(p.abs().sum() > 0 for p in lora_b)  # RL moved the adapter off its zero init
    assert summary["accuracy_after"] == evals[-1][1] == heldout_accuracy(adapted, tokenizer, tiny.digit_reward)

    assert (out / "report" / "results.md").exists()
    assert f"{summary['accuracy_before']:.1%}" in printed and str(out) in printed


def local_sums(tmp_path, suffix: str = "jsonl", num_heldout: int | None = 8) -> list[str]:
    """Train flags for the tiny local model on 40 sums in a local file (column "question"), `num_heldout` of them
    held out (None: the default share)."""
    rows = [{"question": f"{a}+{a + 3}=", "answer": str(2 * a + 3)} for a in range(10, 50)]
    data = tmp_path / f"sums.{suffix}"
    if suffix == "jsonl":
        data.write_text("\n".join(json.dumps(row) for row in rows))
    else:
        with data.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=["question", "answer"])
            writer.writeheader()
            writer.writerows(rows)
    heldout = [] if num_heldout is None else ["--num_heldout", str(num_heldout)]
    return ["--model_name_or_path", tiny.model_dir(), "--dataset_name", str(data), "--prompt_column", "question",
            *heldout, "--max_completion_length", "6", "--write_report", "false"]


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_train_local_model_and_local_dataset_file(tmp_path, suffix):
    data = tmp_path / f"sums.{suffix}"
    out = tmp_path / "run"
    assert main(["train", *local_sums(tmp_path, suffix), *TINY_RL, "--output_dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == tiny.model_dir() and summary["task"] == str(data) and summary["steps"] == 2
    assert (out / "adapter_config.json").exists()
    assert not (out / "report").exists()


def test_dataset_run_says_what_it_holds_out_and_reports_its_last_step(tmp_path, capsys, monkeypatch):
    lengths = []

    def recording_evaluation(*args, max_new_tokens, **kwargs):
        lengths.append(max_new_tokens)
        return greedy_evaluation(*args, max_new_tokens=max_new_tokens, **kwargs)

    monkeypatch.setattr(trl_zoo.cli.train.heldout_accuracy, "greedy_evaluation", recording_evaluation)
    out = tmp_path / "run"
    argv = ["train", *local_sums(tmp_path, num_heldout=None), *TINY_RL, "--logging_steps", "10",
            "--output_dir", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    # 40 rows, no test split: 10% held out, and the log says so
    assert f"{tmp_path / 'sums.jsonl'}: no 'test' split, so 4 of its 40 rows are held out for the greedy" in printed
    assert json.loads((out / "summary.json").read_text())["heldout_size"] == 4
    assert lengths == [6, 6, 6]  # before RL and after steps 1 and 2, at the run's max_completion_length
    # 2 steps with logging_steps 10: the last step is still logged, shown and recorded
    assert "  step    2/2  reward " in printed
    assert [r["step"] for r in read_records(out) if r["kind"] == "train"] == [2]


def test_train_resumes_from_the_last_checkpoint_and_continues_the_run_log(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", *local_sums(tmp_path), *TINY_RL, "--save_strategy", "steps", "--save_steps", "2",
            "--output_dir", str(out)]
    assert main([*argv, "--max_steps", "4"]) == 0
    first = read_records(out)
    capsys.readouterr()

    assert main([*argv, "--max_steps", "6", "--resume_from_checkpoint", "true"]) == 0
    assert f"Resuming from {out / 'checkpoint-4'} (step 4)." in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 6
    records = read_records(out)
    assert records[: len(first)] == first  # the first run's log is kept as it was, and continued
    steps = lambda kind: [r["step"] for r in records if r["kind"] == kind]  # noqa: E731
    assert steps("train") == [1, 2, 3, 4, 5, 6]  # steps 1-4 were not trained again
    assert steps("eval") == [0, 1, 2, 3, 4, 5, 6] and steps("end") == [4, 6]
    assert summary["accuracy_before"] == first[0]["heldout_accuracy"] and first[0]["step"] == 0

    # A checkpoint by path: the records after its step belong to the steps trained again, and are replaced by them,
    # the same numbers (the checkpoint restores the weights, the optimizer and the random state).
    assert main([*argv, "--max_steps", "4", "--resume_from_checkpoint", str(out / "checkpoint-2")]) == 0
    again = read_records(out)
    assert again[: sum(r["step"] <= 2 for r in first)] == [r for r in first if r["step"] <= 2]
    assert [r["step"] for r in again if r["kind"] == "train"] == [1, 2, 3, 4]
    redone = {r["step"]: r for r in again if r["kind"] == "train" and r["step"] > 2}
    for record in first:
        if record["kind"] == "train" and record["step"] > 2:
            assert redone[record["step"]]["reward"] == pytest.approx(record["reward"])
            assert redone[record["step"]]["loss"] == pytest.approx(record["loss"], abs=1e-6)


def test_default_output_dir_is_named_by_the_preset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dirs = {}
    for preset in ("dapo", "prorl", "vapo"):  # three presets with loss_type dapo
        _, training_args, _ = parse_train_args(["--config", str(ROOT / "configs" / f"{preset}.yaml")])
        assert training_args.loss_type == "dapo"
        dirs[preset] = training_args.output_dir
    assert dirs == {preset: f"runs/addition-{preset}" for preset in dirs}
    assert parse_train_args([]).training.output_dir == "runs/addition-grpo"  # no preset: the loss names the run
    assert parse_train_args(["--loss_type", "gspo", "--task", "addition3"]).training.output_dir == (
        "runs/addition3-gspo")


def test_running_the_quickstart_again_starts_a_new_default_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("runs/addition-grpo").mkdir(parents=True)
    assert parse_train_args([]).training.output_dir == "runs/addition-grpo-2"
    Path("runs/addition-grpo-2").mkdir()
    assert parse_train_args([]).training.output_dir == "runs/addition-grpo-3"
    # resuming, or replacing on purpose, keeps the named directory
    assert parse_train_args(["--resume_from_checkpoint", "true"]).training.output_dir == "runs/addition-grpo"
    assert parse_train_args(["--overwrite_output_dir", "true"]).training.output_dir == "runs/addition-grpo"


def test_train_never_replaces_an_earlier_run_silently(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", *local_sums(tmp_path), *TINY_RL, "--output_dir", str(out)]
    assert main(argv) == 0
    finished = (out / "summary.json").read_text()
    capsys.readouterr()

    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert error == (f"trl-zoo train: error: output_dir: {out} already holds a finished run (summary.json); give "
                     "--output_dir NEW, --resume_from_checkpoint true to continue it, or --overwrite_output_dir true "
                     "to replace it.")  # TRL saved checkpoint-2 at the end of the run
    assert (out / "summary.json").read_text() == finished

    (out / "summary.json").unlink()  # as if the run had been interrupted after its checkpoint
    assert main(argv) == 2
    assert f"output_dir: {out} already holds an unfinished run (checkpoint-2); give" in capsys.readouterr().err

    assert main([*argv, "--overwrite_output_dir", "true"]) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 2


# ------------------------------------------------------------------------------------------------------ compare
def test_compare_two_losses_writes_table_csv_and_png(tmp_path, capsys):
    report_dir = tmp_path / "cmp"
    argv = ["compare", "--losses", "grpo,dapo", "--report_dir", str(report_dir), "--seed", "0", *TINY_BOOTSTRAP,
            *TINY_RL]
    assert main(argv) == 0  # --seed: one run per loss, in <report_dir>/<loss>
    assert "compare: no --seeds" not in capsys.readouterr().out
    summaries = {name: json.loads((report_dir / name / "summary.json").read_text()) for name in ("grpo", "dapo")}
    assert summaries["grpo"]["model"] == summaries["dapo"]["model"]  # same base policy, task and seed
    assert summaries["grpo"]["seed"] == summaries["dapo"]["seed"] == 0 and summaries["grpo"]["task"] == "addition"
    assert summaries["grpo"]["accuracy_before"] == summaries["dapo"]["accuracy_before"]
    assert summaries["grpo"]["heldout_size"] == summaries["dapo"]["heldout_size"] == ADDITION.num_heldout

    table = (report_dir / "results.md").read_text()
    for name, summary in summaries.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| {name} |"))
        assert f"{summary['accuracy_after']:.1%}" in row
    # The barely bootstrapped policy samples no right sum in two steps (every advantage 0), so neither loss moves it
    # off its starting accuracy: the two runs are one run, and the report must say so and why, not call it a tie.
    accuracy = summaries["grpo"]["accuracy_before"]
    assert all(s["accuracy_after"] == s["best_accuracy"] == accuracy for s in summaries.values())
    assert "**grpo and dapo are identical runs** on seed 0" in table and "tied" not in table
    assert "Why: every group's rewards were equal at every step, so every advantage was 0" in table
    assert "evaluation noise" not in table  # a zero gap: nothing to weigh against the evaluation noise

    with (report_dir / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {row["run"] for row in rows} == {"grpo", "dapo"}
    kinds = ("train", "eval", "end")
    assert {(row["run"], row["kind"]) for row in rows} == {(r, k) for r in ("grpo", "dapo") for k in kinds}
    jsonl = [json.loads(line) for line in (report_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(jsonl) == len(rows)

    for png in ("curves.png", "heldout_accuracy.png"):
        with Image.open(report_dir / png) as image:
            image.verify()
            assert image.format == "PNG" and image.size[0] > 100


def test_report_names_the_highest_run_and_tabulates_last_values(tmp_path):
    def run(name, accuracies, rewards, seconds):
        records = [{"kind": "eval", "step": step, "heldout_accuracy": acc} for step, acc in accuracies]
        records += [
            {"kind": "train", "step": step, "reward": reward, "entropy": 0.5, "completions/mean_length": 3.0,
             "clip_ratio/region_mean": 0.01}
            for step, reward in rewards
        ]
        summary = {"accuracy_before": accuracies[0][1], "accuracy_after": accuracies[-1][1], "train_seconds": seconds,
                   "loss_type": name, "task": "addition", "model": "/some/where/tiny", "seed": 0}
        return Run(name, summary, records)

    grpo = run("grpo", [(0, 0.5), (10, 0.8), (20, 0.7)], [(10, 0.4), (20, 0.6)], 30.0)
    dapo = run("dapo", [(0, 0.5), (10, 0.6), (20, 0.75)], [(10, 0.3), (20, 0.5)], 20.0)
    text = write_report(tmp_path, [grpo, dapo]).read_text()
    assert text.startswith("# trl-zoo: addition with tiny, seed 0")
    # "—": these summaries, like older runs', record no mean reward
    assert "| grpo | grpo | 50.0% | 70.0% | 80.0% (10) | — | 0.6 | 0.5 | 3 | 0.01 | 30.0 |" in text
    assert "| dapo | dapo | 50.0% | 75.0% | 75.0% (20) | — | 0.5 | 0.5 | 3 | 0.01 | 20.0 |" in text
    assert ("**No winner on one seed**: dapo ended highest (the highest final held-out accuracy): 75.0% final, 75.0% "
            "best, against grpo's 70.0%") in text


def fake_training(finals: dict, before: dict, commands: list):
    """Stands in for subprocess.run in compare: each (loss, seed) run writes the final accuracy `finals` gives it."""

    def fake_train(command, env):
        commands.append(command)
        flag = lambda name: command[command.index(name) + 1]  # noqa: E731
        loss, seed, output = flag("--loss_type"), int(flag("--seed")), Path(flag("--output_dir"))
        output.mkdir(parents=True, exist_ok=True)
        summary = {"accuracy_before": before[seed], "accuracy_after": finals[loss, seed], "train_seconds": 1.0,
                   "loss_type": loss, "seed": seed, "task": "addition", "model": "base"}
        (output / "summary.json").write_text(json.dumps(summary))
        evals = [{"kind": "eval", "step": 0, "heldout_accuracy": before[seed]},
                 {"kind": "eval", "step": 5, "heldout_accuracy": finals[loss, seed]}]
        (output / "metrics.jsonl").write_text("\n".join(json.dumps(record) for record in evals))
        return subprocess.CompletedProcess(command, 0)

    return fake_train


def test_compare_over_seeds_runs_every_loss_per_seed_and_ranks_by_the_mean(tmp_path, monkeypatch, capsys):
    """Every (loss, seed) gets its own process, directory and --seed; the report ranks losses by mean final
    accuracy over seeds and gives the paired-by-seed interval of the first minus the second. The training runs are
    faked (the real subprocess path is covered above): each writes the accuracy this table gives it."""
    finals = {("grpo", 0): 0.70, ("grpo", 1): 0.50, ("dapo", 0): 0.60, ("dapo", 1): 0.55}
    commands = []
    monkeypatch.setattr(subprocess, "run", fake_training(finals, {0: 0.40, 1: 0.30}, commands))
    report_dir = tmp_path / "cmp"
    assert main(["compare", "--losses", "grpo,dapo", "--seeds", "0,1", "--report_dir", str(report_dir)]) == 0
    assert [(c[c.index("--loss_type") + 1], c[c.index("--seed") + 1]) for c in commands] == [
        ("grpo", "0"), ("dapo", "0"), ("grpo", "1"), ("dapo", "1")]
    assert commands[0][commands[0].index("--output_dir") + 1] == str(report_dir / "grpo" / "seed0")
    text = (report_dir / "results.md").read_text()
    assert text.startswith("# trl-zoo: addition with base, seeds 0, 1")
    assert "| grpo seed 1 | grpo | 30.0% | 50.0% | 50.0% (5) |" in text  # the per-run table stays
    assert "| grpo | 0, 1 | 35.0% | 60.0% | 50.0%–70.0% | +25.0 | 60.0% | 1.0 |" in text
    assert "| dapo | 0, 1 | 35.0% | 57.5% | 55.0%–60.0% | +22.5 | 57.5% | 1.0 |" in text
    # differences +10 and -5 points: mean +2.5, sd 10.6, se 7.5, 95% CI 2.5 -+ 12.706 * 7.5 (t, 1 degree of freedom)
    assert "| grpo − dapo | +2.5 | [-92.8, +97.8] | 1 of 2 seeds | within seed noise |" in text
    verdict = ("**grpo and dapo cannot be told apart**: +2.5 points, 95% CI [-92.8, +97.8] over 2 seeds (paired by "
               "seed); grpo ahead on 1 of 2. The interval includes 0, so grpo's first place (mean final held-out "
               "accuracy grpo 60.0%, dapo 57.5%) is within seed noise.")
    assert verdict in text and verdict in capsys.readouterr().out


def test_compare_refuses_a_report_dir_with_finished_runs(tmp_path, monkeypatch, capsys):
    commands = []
    monkeypatch.setattr(subprocess, "run", fake_training({("grpo", 0): 0.5, ("dapo", 0): 0.6}, {0: 0.4}, commands))
    argv = ["compare", "--losses", "grpo,dapo", "--seeds", "0", "--report_dir", str(tmp_path / "cmp")]
    assert main(argv) == 0 and len(commands) == 2
    assert main(argv) == 2 and len(commands) == 2  # nothing ran again
    assert capsys.readouterr().err.strip() == (
        f"trl-zoo compare: error: report_dir: {tmp_path / 'cmp'} already holds finished runs (grpo seed 0, dapo seed "
        "0); give --report_dir NEW or --overwrite_output_dir true to replace them.")
    assert main([*argv, "--overwrite_output_dir", "true"]) == 0 and len(commands) == 4
    assert commands[-1][commands[-1].index("--overwrite_output_dir") + 1] == "true"  # passed on to train


def test_compare_on_a_built_in_task_defaults_to_three_seeds(tmp_path, monkeypatch, capsys):
    finals = {("grpo", 0): 0.50, ("grpo", 1): 0.60, ("grpo", 2): 0.55,
              ("gspo", 0): 0.54, ("gspo", 1): 0.65, ("gspo", 2): 0.61}
    commands = []
    monkeypatch.setattr(subprocess, "run", fake_training(finals, {0: 0.4, 1: 0.4, 2: 0.4}, commands))
    report_dir = tmp_path / "cmp"
    assert main(["compare", "--losses", "grpo,gspo", "--report_dir", str(report_dir), "--max_steps", "2"]) == 0
    assert [(c[c.index("--loss_type") + 1], c[c.index("--seed") + 1]) for c in commands] == [
        ("grpo", "0"), ("gspo", "0"), ("grpo", "1"), ("gspo", "1"), ("grpo", "2"), ("gspo", "2")]
    out = capsys.readouterr().out
    assert ("compare: no --seeds on a built-in task, so every loss runs with seeds 0,1,2 and the report pairs them "
            "by seed; give --seeds 0 for a single seed.") in out
    # gspo ahead by 4, 5 and 6 points: mean 5, sd 1, 95% CI 5 -+ 4.303 / sqrt(3) = [+2.5, +7.5]
    assert "**gspo beats grpo** beyond seed noise: +5.0 points, 95% CI [+2.5, +7.5] over 3 seeds" in out


def test_compare_rejects_an_unknown_loss_before_running_anything(tmp_path, capsys):
    report_dir = tmp_path / "cmp"
    assert main(["compare", "--losses", "grpo,grpo_plus_plus", "--report_dir", str(report_dir)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "losses: unknown loss 'grpo_plus_plus'" in error and "Known:" in error
    assert not report_dir.exists()


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--losses", "grpo"], "losses: give at least two"),
        (
            ["--losses", "grpo,configs/no_such_recipe.yaml"],
            "losses: no such config file 'configs/no_such_recipe.yaml'",
        ),
        (["--losses", "grpo,configs/gmpo.yaml", "--config", "configs/grpo.yaml"], "--config cannot be given as well"),
        (["--losses", "grpo,dapo", "--loss_type", "sapo"], "loss_type: set per run by compare"),
        (["--losses", "grpo,grpo"], "losses: names must be distinct"),
        (["--report_dir", "x"], "the following arguments are required: --losses"),
        (["--losses", "grpo,dapo", "--seeds", "0,x"], "seeds: expected comma-separated integers"),
        (["--losses", "grpo,dapo", "--seeds", "1,1"], "seeds: expected distinct"),
        (["--losses", "grpo,dapo", "--seeds", "0,1", "--seed", "3"], "seeds: give the seeds with --seeds only"),
    ],
)
def test_compare_argument_errors_are_one_line(argv, expected, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["compare", *argv]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and error.startswith("trl-zoo compare: error: ") and expected in error, error


# ------------------------------------------------------------------------------------------------------ bad config
def _yaml(tmp_path, mapping) -> list[str]:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(mapping))
    return ["--config", str(path)]


BAD_CONFIGS = {
    "unknown loss flag": (lambda p: ["--loss_type", "grpoo"], ["loss_type", "'grpo'"]),
    "unknown loss in yaml": (lambda p: _yaml(p, {"loss_type": "no_such_loss"}), ["loss_type", "no_such_loss"]),
    "misspelt yaml key": (lambda p: _yaml(p, {"lerning_rate": 0.001}), ["lerning_rate", "'learning_rate'"]),
    "wrong type in yaml": (lambda p: _yaml(p, {"learning_rate": "fast"}), ["learning_rate", "fast"]),
    "float for int in yaml": (lambda p: _yaml(p, {"max_steps": 2.5}), ["max_steps"]),
    "mapping in yaml": (lambda p: _yaml(p, {"lora_r": {"value": 4}}), ["lora_r"]),
    "wrong type flag": (lambda p: ["--max_steps", "many"], ["max_steps", "many"]),
    "misspelt flag": (lambda p: ["--lerning_rate", "1e-3"], ["lerning_rate", "--learning_rate"]),
    "impossible value": (lambda p: ["--epsilon", "1.5"], ["epsilon"]),
    "unknown task": (lambda p: ["--task", "subtraction"], ["task", "subtraction"]),
    "dataset without model": (lambda p: ["--dataset_name", "x.jsonl"], ["model_name_or_path"]),
    "missing data file": (lambda p: ["--dataset_name", "x.jsonl", "--model_name_or_path", "m"], ["dataset_name"]),
    "qlora without gpu": (lambda p: ["--load_in_4bit", "--model_name_or_path", tiny.model_dir()], ["load_in_4bit"]),
    "resume without checkpoint": (lambda p: ["--resume_from_checkpoint", "true"], ["resume_from_checkpoint", "no "]),
    "resume from elsewhere": (lambda p: ["--resume_from_checkpoint", str(p)], ["resume_from_checkpoint", "not a "]),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_config_exits_nonzero_with_one_line_naming_the_field(case, tmp_path, capsys):
    make_argv, expected = BAD_CONFIGS[case]
    argv = make_argv(tmp_path)
    capsys.readouterr()  # building the tiny model may print progress bars
    assert main(["train", *argv, "--output_dir", str(tmp_path / "run")]) == 2
    captured = capsys.readouterr()
    error = captured.err.strip()
    assert error.count("\n") == 0, error
    assert error.startswith("trl-zoo train: error: ")
    for fragment in expected:
        assert fragment in error, error
    assert "Traceback" not in captured.out + captured.err


def test_bad_config_from_the_console_has_no_traceback():
    completed = subprocess.run(
        [sys.executable, "-m", "trl_zoo.cli", "train", "--loss_type", "grpoo"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert completed.returncode == 2
    assert completed.stderr.strip().count("\n") == 0, completed.stderr
    assert "loss_type: unknown loss 'grpoo'. Did you mean 'grpo'?" in completed.stderr
    assert "Traceback" not in completed.stderr and completed.stdout == ""


def test_resume_true_skips_a_half_written_checkpoint_and_says_so(tmp_path, capsys):
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-4").mkdir()  # a save killed before trainer_state.json, which transformers writes last
    (tmp_path / "checkpoint-4" / "model.safetensors").write_text("")
    assert resume_checkpoint("true", str(tmp_path)) == str(tmp_path / "checkpoint-2")
    printed = capsys.readouterr().out.strip()
    assert printed == (
        "resume_from_checkpoint: skipped checkpoint-4 (no trainer_state.json: the save did not finish); resuming "
        "from the last complete checkpoint, checkpoint-2."
    )

    (tmp_path / "checkpoint-2" / "trainer_state.json").unlink()
    with pytest.raises(trl_zoo.cli.errors.ConfigError, match=r"^resume_from_checkpoint: no complete checkpoint-N"):
        resume_checkpoint("true", str(tmp_path))


@pytest.mark.parametrize("saved", [True, False], ids=["checkpoint", "no-checkpoint"])
def test_ctrl_c_during_train_is_one_line_and_exit_status_130(tmp_path, capsys, monkeypatch, saved):
    out = tmp_path / "run"

    def interrupted_train(self, resume_from_checkpoint=None, *args, **kwargs):
        if saved:
            (out / "checkpoint-2").mkdir(parents=True)
            (out / "checkpoint-2" / "trainer_state.json").write_text("{}")
        self.state.global_step = 3
        raise KeyboardInterrupt

    monkeypatch.setattr(trl_zoo.cli.train.training_setup.GRPOTrainer, "train", interrupted_train)
    assert main(["train", *local_sums(tmp_path), *TINY_RL, "--output_dir", str(out)]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    if saved:
        assert line == (
            f"trl-zoo train: interrupted at step 3; last checkpoint: {out / 'checkpoint-2'}; resume with "
            f"--resume_from_checkpoint true."
        )
    else:
        assert line == (
            "trl-zoo train: interrupted at step 3; no checkpoint saved, so a new run starts from the beginning."
        )


def test_ctrl_c_outside_training_is_one_line_and_exit_status_130(capsys, monkeypatch):
    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setitem(COMMANDS, "list", interrupted)
    assert main(["list"]) == 130
    assert capsys.readouterr().err == "trl-zoo list: interrupted.\n"


@pytest.mark.parametrize("use_peft, silenced", [("true", True), ("false", False)])
def test_fsdp2_tied_output_layer_warning_is_dropped_only_for_a_frozen_layer(tmp_path, use_peft, silenced):
    """FSDP2's warning that the tied output layer "did not run forward before backward" (TRL's fused LM head reads
    the weight without calling the layer) is dropped when that weight is frozen, as under LoRA (issue 27)."""
    import warnings

    argv = [*local_sums(tmp_path), *TINY_RL, "--use_peft", use_peft, "--output_dir", str(tmp_path / "run")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        setup = trl_zoo.cli.train.training_setup.prepare_training(*parse_train_args(argv), log=lambda *_: None)
        output_weight = setup.trainer.model.get_output_embeddings().weight
        assert output_weight.requires_grad != silenced
        caught.clear()
        warnings.warn("FSDP2 group (lm_head) did not run forward before backward, which is error-prone")
    assert len(caught) == (0 if silenced else 1)
