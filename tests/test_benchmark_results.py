"""benchmarks/results/ as the docs use it: every link into it resolves to a kept file, every study folder has its
page and the summary files that page names, every figure can be redrawn from what is kept (its script's loader
parses the kept data into the numbers it plots; nothing is drawn), and the folder stays within its budget.

Per-run raw files live in one `raw.tar.xz` per study; the figures drawn from run folders are checked by unpacking
the members their loader reads into a temporary folder."""

from __future__ import annotations

import json
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks import compiled_decoding, real_model_report, testbed_figures, time_to_target, time_to_target_figure

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
MAX_FILES, MAX_BYTES = 150, 4_000_000
LINK = re.compile(r"\]\(([^)\s]+)\)")


def kept_files() -> set[str]:
    """Paths under benchmarks/results/ (relative to it) that git tracks and that exist; without git, every file."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", "benchmarks/results"], cwd=ROOT, capture_output=True,
                                check=True).stdout.decode().split("\0")
        paths = [ROOT / p for p in listed if p]
    except (OSError, subprocess.CalledProcessError):
        paths = [p for p in RESULTS.rglob("*") if p.is_file()]
    return {p.relative_to(RESULTS).as_posix() for p in paths if p.is_file()}


KEPT = kept_files()


def links_into_results(text: str, base: Path) -> list[tuple[str, str]]:
    """(link as written, path relative to benchmarks/results/) of every relative link of `text` into the results."""
    found = []
    for target in LINK.findall(text):
        if target.startswith(("http:", "https:", "mailto:", "#")):
            continue
        resolved = (base / target.split("#")[0]).resolve()
        if resolved == RESULTS or RESULTS in resolved.parents:
            found.append((target, resolved.relative_to(RESULTS).as_posix()))
    return found


def broken_links(text: str, base: Path, kept: set[str]) -> list[str]:
    """The links of `text` into the results that name neither a kept file nor a folder holding one."""
    return [target for target, path in links_into_results(text, base)
            if path not in kept and not any(k.startswith(path.rstrip("/") + "/") for k in kept) and path != "."]


def doc_pages() -> list[Path]:
    pages = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return pages + [RESULTS / p for p in sorted(KEPT) if p.endswith(".md")]


# --- (a) links

def test_every_link_into_the_results_names_a_kept_file():
    linked, broken = 0, []
    for page in doc_pages():
        if not page.exists():
            continue
        text = page.read_text()
        linked += len(links_into_results(text, page.parent))
        broken += [f"{page.relative_to(ROOT)} -> {target}" for target in broken_links(text, page.parent, KEPT)]
    assert not broken, "links into benchmarks/results/ that name nothing kept:\n" + "\n".join(broken)
    assert linked > 20  # the docs do link the studies: the scan is not empty


def test_a_link_to_a_packed_or_missing_file_is_reported():
    text = ("[kept](../benchmarks/results/2026-11-26-h200-speed.md) "
            "[packed](../benchmarks/results/2026-11-27-h200x2-time-to-target/runs/seed0/trl/log.txt) "
            "[study](../benchmarks/results/2026-11-27-h200x2-time-to-target/) [web](https://example.org/x.png)")
    assert broken_links(text, ROOT / "docs", KEPT) == [
        "../benchmarks/results/2026-11-27-h200x2-time-to-target/runs/seed0/trl/log.txt"]


# --- (b) study folders: page and summaries

def time_to_target_study(*extra: str) -> tuple[str, list[str]]:
    """A time-to-target study: its records; the driver's summary table of each records file is in the page."""
    return "README.md", ["records.jsonl", *extra]


# folder -> (its page, relative to the folder or "../NAME.md" beside it; the summary files that page names)
STUDIES: dict[str, tuple[str, list[str]]] = {
    "2026-11-26-cpu-testbed": ("../2026-11-26-cpu-testbed.md", ["figures.md"]),
    "2026-11-26-cpu-testbed-lr1e-4": ("../2026-11-26-cpu-testbed-lr1e-4.md", ["figures.md"]),
    "2026-11-26-cpu-testbed-offpolicy16": ("../2026-11-26-cpu-testbed-offpolicy16.md", ["figures.md"]),
    "2026-11-26-h200-testbed": ("../2026-11-26-h200-testbed.md",
                                ["figures.md", "b/figures.md", "e-lr2e-5/figures.md"]),
    "2026-11-26-h200-real-model": ("README.md", ["tables.md"]),
    "2026-11-26-h200-real-model-2": ("README.md", ["summaries.jsonl"]),
    "2026-11-27-h200-real-model-3": ("README.md", ["tables.md", "pass_at_k.jsonl"]),
    "2026-11-27-h200x2-offpolicy-seeds": ("README.md", ["tables.md"]),
    "2026-11-27-h200x2-teacher": ("README.md", ["tables.md"]),  # cost/summary.md: in the page and raw.tar.xz
    # the multi-GPU driver's summary.md is in the page, its runs.jsonl in raw.tar.xz
    "2026-11-26-h200x2-multi-gpu": ("README.md", []),
    "2026-11-27-h200x2-multi-gpu-2": ("README.md", []),
    "2026-11-27-h200x2-multi-gpu-3": ("README.md", []),
    "2026-11-27-cpu-deepspeed-zero-parity": ("README.md", []),  # the driver's summary.md in the page
    "2026-11-27-h200x2-compiled-decoding": ("README.md", ["records.jsonl"]),
    "2026-11-27-h200x2-compiled-decoding-2": ("README.md", ["records.jsonl"]),
    "2026-11-27-h200-step-breakdown": time_to_target_study(),
    "2026-11-27-h200x2-time-to-target": time_to_target_study(),
    "2026-11-27-h200x2-time-to-target-2": time_to_target_study(),
    "2026-11-27-h200x2-time-to-target-3": time_to_target_study(),
    "2026-11-27-h200x2-time-to-target-4": time_to_target_study(),
    "2026-11-27-h200x2-time-to-target-5": time_to_target_study(),
    "2026-11-27-h200x2-time-to-target-6": time_to_target_study("bf16_weights/records.jsonl"),
    "2026-11-27-h100x4-time-to-target-trl-best": time_to_target_study(),
    "2026-11-27-h100x4-time-to-target-cuda-graph": time_to_target_study("graph_kept_alive/records.jsonl"),
    "2026-11-27-h100x4-time-to-target-lora-graphed": time_to_target_study(),
    "2026-11-28-h200-size-ladder": ("README.md", ["ladder.jsonl"]),
    "2026-12-02-h200-vllm": ("README.md", ["results.jsonl"]),
    "2026-12-02-h200-vllm-levers": ("README.md", ["ladder.jsonl", "vllm_generation.jsonl", "log_prob_pass.jsonl"]),
    "2026-11-29-h200-step-profile": ("README.md", ["profile.jsonl"]),
    "2026-12-02-h200-methods": ("README.md", ["runs.jsonl"]),
    "2026-12-04-h200-vllm-time-to-target": ("README.md", ["records.jsonl"]),
}


def page_of(folder: str) -> Path:
    return (RESULTS / folder / STUDIES[folder][0]).resolve()


def test_every_study_folder_is_listed_here():
    folders = {path.split("/")[0] for path in KEPT if "/" in path}
    assert folders == set(STUDIES), "a study folder without its entry in STUDIES, or an entry without its folder"


@pytest.mark.parametrize("folder", sorted(STUDIES))
def test_a_study_keeps_its_page_and_the_summaries_it_names(folder):
    page = page_of(folder)
    assert page.relative_to(RESULTS).as_posix() in KEPT, f"{folder}: no page"
    text = " ".join(page.read_text().split())
    for summary in STUDIES[folder][1]:
        assert f"{folder}/{summary}" in KEPT, f"{folder}: {summary} is not kept"
        named = (RESULTS / folder / summary).relative_to(page.parent).as_posix()
        assert named in text, f"{page.name} does not name {named}"
    if f"{folder}/raw.tar.xz" in KEPT:
        assert "raw.tar.xz" in text and "tar -xJf" in text, f"{page.name} does not say how to unpack its raw files"


def test_every_flat_summary_is_named_by_a_flat_page():
    flat_pages = "".join((RESULTS / p).read_text() for p in KEPT if "/" not in p and p.endswith(".md"))
    flat_data = [p for p in KEPT if "/" not in p and not p.endswith(".md")]
    assert flat_data and all(p in flat_pages for p in flat_data)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def table_cells(markdown: str) -> list[dict[str, str]]:
    """The first Markdown table of `markdown` as rows of header -> cell."""
    rows = [line for line in markdown.splitlines() if line.startswith("|")]
    header, *body = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows if "---" not in row]
    return [dict(zip(header, row)) for row in body]


def summary_in_page(folder: str, records: str) -> str:
    """The table the study's page shows under "`...summary_table` of `RECORDS`" (the driver's summary.md, moved into
    the page): the Markdown table that follows that line."""
    lines = page_of(folder).read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if f"summary_table` of `{records}`" in line), None)
    assert start is not None, f"{folder}: its page shows no summary table of {records}"
    table: list[str] = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    return "\n".join(table)


TIME_TO_TARGET_RECORDS = [(folder, records) for folder in sorted(STUDIES) if "compiled-decoding" not in folder
                          for records in STUDIES[folder][1] if records.endswith("records.jsonl")]


@pytest.mark.parametrize(("folder", "records"), TIME_TO_TARGET_RECORDS)
def test_a_time_to_target_summary_is_recomputed_from_its_records(folder, records):
    """Every column of the summary table the page shows is what `time_to_target.summary_table` makes of its records
    (a later version of the table may add columns)."""
    shown_table = summary_in_page(folder, records)
    best = re.search(r"× TRL best \((\w+)\)", shown_table)  # the study's --best, named in its header
    recomputed_table = time_to_target.summary_table(
        read_jsonl(RESULTS / folder / records), *([best.group(1)] if best else [])
    )
    kept, recomputed = table_cells(shown_table), table_cells(recomputed_table)
    assert [row["run"] for row in kept] == [row["run"] for row in recomputed]
    for shown, again in zip(kept, recomputed):
        assert shown == {column: again[RENAMED_COLUMNS.get(column, column)] for column in shown}


# a column a later table names otherwise -> its name now (records without the training/evaluation split report the
# process's peak as the training peak)
RENAMED_COLUMNS = {"peak memory GiB, max": "training peak GiB, max"}


@pytest.mark.parametrize("folder", ["2026-11-27-h200x2-compiled-decoding", "2026-11-27-h200x2-compiled-decoding-2"])
def test_a_compiled_decoding_summary_is_recomputed_from_its_records(folder):
    records = read_jsonl(RESULTS / folder / "records.jsonl")
    assert compiled_decoding.summary_table(records) == summary_in_page(folder, "records.jsonl")


# --- (c) figures

@dataclass(frozen=True)
class Figure:
    data: tuple[str, ...]  # kept files (relative to benchmarks/results/) the figure is drawn from
    script: str  # the script that draws it
    kind: str  # which loader reads the data: "time_to_target", "testbed" or "real_model"
    runs: tuple[str, ...] = ()  # archive members' folders holding the run files, in the loader's order
    key: str = ""  # testbed: the figure's key; real model: the figure's file name without the task prefix
    task: str = "chat_arithmetic"
    names: tuple[str, ...] = ()  # real model: the configurations drawn, where the script of the day drew others


def ttt(folder: str) -> Figure:
    return Figure((f"{folder}/records.jsonl",), "benchmarks/time_to_target_figure.py", "time_to_target")


def bed_figure(folder: str, key: str, runs: tuple[str, ...] = ("runs",), summary: str = "figures.md") -> Figure:
    return Figure((f"{folder}/raw.tar.xz", f"{folder}/{summary}"), "benchmarks/testbed_figures.py", "testbed",
                  tuple(f"{folder}/raw.tar.xz:{r}" for r in runs), key)


REAL = "benchmarks/real_model_report.py"
RM1, RM2, RM3 = "2026-11-26-h200-real-model", "2026-11-26-h200-real-model-2", "2026-11-27-h200-real-model-3"
OFF, TEACHER = "2026-11-27-h200x2-offpolicy-seeds", "2026-11-27-h200x2-teacher"
RM1_RUNS = tuple(f"{RM1}/raw.tar.xz:runs/easy{n}" for n in (1, 3, 4))
RM3_RUNS = (f"{RM3}/raw.tar.xz:runs", f"{RM3}/raw.tar.xz:runs_repeat")


def real(tables: str, runs: tuple[str, ...], key: str, task: str = "chat_arithmetic", names=()) -> Figure:
    archives = tuple(dict.fromkeys(r.split(":")[0] for r in runs))
    return Figure((*archives, tables), REAL, "real_model", runs, key, task, tuple(names))


H200_TESTBED = "2026-11-26-h200-testbed"
FIGURES: dict[str, Figure] = {
    **{f"2026-11-27-h200x2-time-to-target{n}/time_to_target.png": ttt(f"2026-11-27-h200x2-time-to-target{n}")
       for n in ("", "-2", "-3", "-4", "-5", "-6")},
    **{f"{folder}/{key}.png": bed_figure(folder, key)
       for folder in ("2026-11-26-cpu-testbed", "2026-11-26-cpu-testbed-lr1e-4", "2026-11-26-cpu-testbed-offpolicy16")
       for key in ("a_clip_higher", "b_dynamic_sampling", "c_dr_grpo_length", "d_off_policy_stability",
                   "e_cispo_accuracy")
       if f"{folder}/{key}.png" in KEPT},
    **{f"{H200_TESTBED}/{key}.png": bed_figure(H200_TESTBED, key, ("runs/main",))
       for key in ("a_clip_higher", "c_dr_grpo_length", "d_off_policy_stability", "e_cispo_accuracy")},
    f"{H200_TESTBED}/b/b_dynamic_sampling.png": bed_figure(H200_TESTBED, "b_dynamic_sampling", ("runs/main", "runs/b"),
                                                        "b/figures.md"),
    f"{H200_TESTBED}/e-lr2e-5/e_cispo_accuracy.png": bed_figure(H200_TESTBED, "e_cispo_accuracy", ("runs/e-lr2e-5",),
                                                             "e-lr2e-5/figures.md"),
    **{f"{RM1}/{key}.png": real(f"{RM1}/tables.md", RM1_RUNS, key)
       for key in ("reward", "wrong_length_dr_grpo", "trl_side_by_side")},
    # the first study's script paired dapo (ε_high 0.28 then) with dapo_symmetric; its successor names the pair
    # dapo_clip_higher / dapo_symmetric
    f"{RM1}/entropy_clip_higher.png": real(f"{RM1}/tables.md", RM1_RUNS, "entropy_clip_higher",
                                           names=("dapo", "dapo_symmetric")),
    **{f"{RM3}/{task}_{key}.png": real(f"{RM3}/tables.md", RM3_RUNS, key, task)
       for task, key in [("chat_arithmetic", "reward"), ("chat_arithmetic", "entropy_clip_higher"),
                         ("chat_arithmetic", "trl_side_by_side"), ("chat_arithmetic_medium", "reward"),
                         ("chat_arithmetic_medium", "wrong_length_dr_grpo"),
                         ("chat_arithmetic_medium", "trl_side_by_side")]},
    f"{OFF}/heldout_offpolicy.png": real(f"{OFF}/tables.md", (f"{RM2}/raw.tar.xz:runs", f"{RM3}/raw.tar.xz:runs",
                                                              f"{OFF}/raw.tar.xz:runs"), "heldout_offpolicy"),
    f"{TEACHER}/heldout_teacher.png": real(f"{TEACHER}/tables.md", (f"{RM3}/raw.tar.xz:runs",
                                                                    f"{TEACHER}/raw.tar.xz:runs"),
                                           "heldout_teacher", "chat_arithmetic_medium"),
    # the teacher study's report ran over its runs and the earlier study's grpo and control of the medium level
    f"{TEACHER}/reward.png": real(f"{TEACHER}/tables.md", (f"{RM3}/raw.tar.xz:runs", f"{TEACHER}/raw.tar.xz:runs"),
                                  "reward", "chat_arithmetic_medium",
                                  names=("grpo", "grpo_teacher", "grpo_teacher_no_context", "control")),
}

# real_model_report.figures: file name -> (configurations drawn, the series: a training metric, a completions
# statistic, or the held-out evaluations)
REAL_MODEL_SERIES = {
    "reward": (None, "train", "reward"),
    "entropy_clip_higher": (["dapo_clip_higher", "dapo_symmetric"], "train", "entropy"),
    "wrong_length_dr_grpo": (["grpo", "dr_grpo"], "completions", "length_wrong"),
    "trl_side_by_side": (["grpo", "trl_grpo", "dapo", "trl_dapo"], "train", "reward"),
    "heldout_offpolicy": (["dapo_symmetric", "dapo_clip_higher", "dppo", "topr", "m2po"], "evals", "heldout_accuracy"),
    "heldout_teacher": (["grpo", "grpo_teacher", "grpo_teacher_no_context", "control"], "evals", "heldout_accuracy"),
}
RUN_FILES = ("summary.json", "metrics.jsonl", "costs.json", "completions.jsonl")
LOADED: dict[tuple[str, ...], dict] = {}  # archive folders -> what the loader made of them (figures share runs)


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    """archive:folder -> a temporary folder holding that folder's run files (only what the loaders read)."""
    cache: dict[str, Path] = {}

    def unpack(where: str, flat: bool = False) -> Path:
        if where not in cache:
            archive, inside = where.split(":")
            dest = tmp_path_factory.mktemp("raw")
            with tarfile.open(RESULTS / archive) as tar:
                members = [m for m in tar.getmembers() if m.isfile() and m.name.startswith(inside + "/")
                           and (m.name.endswith(".jsonl") if flat else m.name.rsplit("/", 1)[-1] in RUN_FILES)]
                assert members, f"{where}: no run files in the archive"
                tar.extractall(dest, members=members, filter="data")
            cache[where] = dest / inside
        return cache[where]

    return unpack


def figures_without_entry(text: str, base: Path) -> list[str]:
    """The figures under benchmarks/results/ that `text` links (or shows) and FIGURES does not list."""
    return [path for target, path in links_into_results(text, base) if target.endswith(".png") and path not in FIGURES]


def test_every_figure_in_the_docs_and_the_results_has_its_data_and_script_listed():
    page = ROOT / "docs" / "benchmarks.md"
    missing = figures_without_entry(page.read_text(), page.parent) if page.exists() else []
    assert not missing, f"figures of docs/benchmarks.md without their FIGURES entry: {missing}"
    kept_figures = {p for p in KEPT if p.endswith(".png")}
    assert kept_figures == set(FIGURES), "every kept figure has its entry, every entry its figure"
    for png, figure in FIGURES.items():
        assert all(data in KEPT for data in figure.data), f"{png}: its data is not kept"
        assert (ROOT / figure.script).is_file(), f"{png}: no {figure.script}"


def test_a_figure_without_its_entry_is_reported():
    text = ("![listed](../benchmarks/results/2026-11-27-h200x2-time-to-target/time_to_target.png) "
            "![unlisted](../benchmarks/results/2026-11-27-h200x2-time-to-target/other.png)")
    assert figures_without_entry(text, ROOT / "docs") == ["2026-11-27-h200x2-time-to-target/other.png"]


@pytest.mark.parametrize("png", sorted(FIGURES))
def test_a_figure_is_recomputable_from_what_is_kept(png, unpacked):
    figure = FIGURES[png]
    if figure.kind == "time_to_target":
        seeds = time_to_target_figure.curves_by_seed(read_jsonl(RESULTS / figure.data[0]))
        assert seeds, f"{png}: no seed with a finished TRL run"
        assert max(len(runs) for runs in seeds.values()) >= 2, f"{png}: no seed with a run beside TRL's"
        for runs in seeds.values():
            assert "trl" in {name for name, _, _ in runs}
            for _, curve, target in runs:
                assert curve and all(isinstance(v, (int, float)) for point in curve for v in point[:3])
                assert target is None or 0 < target <= 1
    elif figure.kind == "testbed":
        check_testbed(png, figure, unpacked)
    else:
        check_real_model(png, figure, unpacked)


def check_testbed(png: str, figure: Figure, unpacked) -> None:
    folder = Path(figure.runs[0].split(":")[1])
    if figure.runs not in LOADED:
        LOADED[figure.runs] = {}
        for where in figure.runs:
            for name, seeds in testbed_figures.load_runs(unpacked(where, flat=True)).items():
                LOADED[figure.runs].setdefault(name, {}).update(seeds)
    runs = LOADED[figure.runs]
    summary = (RESULTS / figure.data[1]).read_text()
    samplers = list(dict.fromkeys(re.findall(r"dapo \+ (\w+) \(n=", summary))) or ["resample"]  # --samplers
    spec = next(f for f in testbed_figures.figures(runs, samplers) if f["key"] == figure.key)
    for label, name in spec["labels"]:
        assert runs.get(name), f"{png}: no runs of {name} ({folder})"
        for metric, _ in spec["panels"]:
            assert any(testbed_figures.series(records, metric) for records in runs[name].values()), (png, name, metric)
    # the kept table of the figure's first metric is what the loader's runs give
    every = int(re.search(r"window of (\d+) steps", summary)[1])
    table = testbed_figures.step_table(runs, spec["labels"], spec["tables"][0], every)
    assert "\n".join(table) in summary, f"{png}: {figure.data[1]} is not what the packed runs give"


def check_real_model(png: str, figure: Figure, unpacked) -> None:
    if figure.runs not in LOADED:
        LOADED[figure.runs] = real_model_report.load_runs([unpacked(where) for where in figure.runs])[0]
    runs = real_model_report.of_task(LOADED[figure.runs], figure.task)
    names, source, key = REAL_MODEL_SERIES[figure.key]
    names = figure.names or names or [n for n in real_model_report.configurations(runs) if not n.startswith("trl_")]
    drawn = [(name, seed) for name in names for seed in (0, 1, 2) if (name, seed) in runs]
    assert drawn, f"{png}: none of {names} in the packed runs"
    tables = (RESULTS / figure.data[-1]).read_text()
    for name, seed in drawn:
        run = runs[(name, seed)]
        values = (run.series(key) if source == "train" else [c.get(key) for c in run.completions]
                  if source == "completions" else [r.get(key) for r in run.evals])
        assert values and any(v is not None for v in values), f"{png}: {name} seed {seed} has no {key}"
        assert f"{run.after:.1%}" in tables, f"{png}: {name} seed {seed} ends at {run.after:.1%}, not in the tables"


# --- (d) budget

def test_the_results_stay_within_150_files_and_4_mb():
    size = sum((RESULTS / p).stat().st_size for p in KEPT)
    assert len(KEPT) <= MAX_FILES, f"{len(KEPT)} files under benchmarks/results/ (at most {MAX_FILES})"
    assert size <= MAX_BYTES, f"{size:,} bytes under benchmarks/results/ (at most {MAX_BYTES:,})"


def test_the_size_ladders_page_states_the_step_times_of_its_records():
    folder = RESULTS / "2026-11-28-h200-size-ladder"
    page = (folder / "README.md").read_text()
    records = [json.loads(line) for line in (folder / "ladder.jsonl").read_text().splitlines()]
    assert len(records) == 11
    for record in records:
        assert f"{record['step_s']:.2f}" in page, record["contender"]


def test_the_vllm_levers_page_states_its_records_step_times_and_generation_medians():
    from benchmarks.vllm_generation import summarize

    folder = RESULTS / "2026-12-02-h200-vllm-levers"
    page = (folder / "README.md").read_text()
    records = [json.loads(line) for line in (folder / "ladder.jsonl").read_text().splitlines()]
    assert len(records) == 35  # 12 of the first batch, 5 of the recipe-and-prompt_once batch, 7 of fused_lora's,
    # 11 of compiled_layers'
    assert sum(r.get("batch") == "compiled_layers" for r in records) == 11
    for record in records:
        assert f"| {record['step_s']:.2f} | {record['seams']['generation']:.2f} |" in page, record["contender"]
    for record in (r for r in records if r.get("batch") in ("fused_lora", "compiled_layers")):
        seams = record["seams"]
        five = sum(seams[k] for k in ("generation", "weight_sync", "old_logps", "loss_forward", "backward"))
        quiet = " / ".join(f"{t:.2f}" for t in record["step_times"][3::2])  # the steps after 2 that decode nothing
        cells = f"| {record['step_s'] - five:.2f} | {record['train_peak_gib']:.1f} | {quiet} |"
        assert f"| {record['run']} | " in page and cells in page, record["run"]
    generation = [json.loads(line) for line in (folder / "vllm_generation.jsonl").read_text().splitlines()]
    for row in summarize(generation)[2:]:
        seconds, inside, tokens = row.split(" | ")[2:5]
        assert f"| {seconds} | {inside} | {tokens} |" in page or f"| {seconds} | {inside} | |" in page, row


def test_the_vllm_levers_page_states_each_log_prob_pass_records_seconds_positions_and_kernel_time():
    folder = RESULTS / "2026-12-02-h200-vllm-levers"
    page = (folder / "README.md").read_text()
    records = [json.loads(line) for line in (folder / "log_prob_pass.jsonl").read_text().splitlines()]
    fused = [r for r in records if r.get("batch") == "fused_lora"]
    records = [r for r in records if r.get("batch") != "fused_lora"]
    assert {r["configuration"] for r in records} == {"trl_gc", "trl", "prompt_once"} and len(records) == 12
    assert len(fused) == 11 and all(r["rows"] == 128 and r["configuration"].endswith("_autocast") for r in fused)
    for r in fused:
        cells = f"| {r['seconds']:.2f} | {r['device_s']:.2f} | {r['launches']:,} | {r['peak_gib']:.1f} |"
        assert f"| {r['micro_batch']} {cells}" in page, (r["shape"], r["configuration"], r["micro_batch"])
    for r in records:
        kernels = sum(k["ms"] for k in r["kernels"]) / 1e3
        cells = f"| {r['positions']:,} | {r['seconds']:.2f} | {kernels:.2f} | {r['peak_gib']:.1f} |"
        assert f"| {r['micro_batch']} {cells}" in page, (r["shape"], r["configuration"], r["micro_batch"])


def test_the_methods_page_states_each_runs_curve_its_gains_over_the_control_and_its_paired_verdict():
    from trl_zoo.cli.report.verdict import PairedDifference

    folder = RESULTS / "2026-12-02-h200-methods"
    page = (folder / "README.md").read_text()
    runs: dict[str, dict[int, dict]] = {}
    for run in map(json.loads, (folder / "runs.jsonl").read_text().splitlines()):
        runs.setdefault(run["configuration"], {})[run["seed"]] = run
    seeds = sorted(runs["grpo"])
    assert seeds == [0, 1, 2] and all(sorted(by_seed) == seeds for by_seed in runs.values())
    control = runs.pop("control")
    for name, by_seed in runs.items():
        curves = " | ".join(  # every evaluation: steps 0, 20, 40 (and 60 for the four-update runs)
            " / ".join(f"{100 * accuracy:.1f}" for _, accuracy in sorted(
                (int(step), accuracy) for step, accuracy in by_seed[s]["heldout_by_step"].items()
            )) + " %"
            for s in seeds
        )
        gains = " / ".join(
            f"{100 * (by_seed[s]['accuracy_after'] - control[s]['accuracy_after']):+.1f}" for s in seeds
        )
        row = f"| {curves} | {gains} |"
        if name != "grpo":
            versus = PairedDifference(name, "grpo", seeds, [
                100 * (by_seed[s]["accuracy_after"] - runs["grpo"][s]["accuracy_after"]) for s in seeds
            ])
            low, high = versus.interval
            row += f" {versus.mean:+.1f} [{low:+.1f}, {high:+.1f}] |"
        assert row.replace("-", "−") in page, name
