"""Built-in task for pretrained chat models: arithmetic questions asked in words, at three levels of difficulty.

    easy    (chat_arithmetic)          "What is 47 + 38?"          answer 85
    medium  (chat_arithmetic_medium)   "What is 47 - 38?"          answer 9     (a ≥ b)
    hard    (chat_arithmetic_hard)     "What is 47 + 38 - 21?"     answer 64

    reward R = [ last number in the completion == answer ]     (final_number, see rewards.py)

Operands are two-digit numbers; the held-out questions are drawn first, by seed, and never asked in training.
The prompts are plain questions: the model answers in its own words (a chat model explains, rambles, and ends with
a number or not), so the reward reads the last number it wrote.

A base model (a tokenizer without a chat template, e.g. the packaged Gemma 3 270M, `gemma3-270m`) continues a
plain question with more questions, so it is asked in a plain-text format it continues instead (`prompt_format`,
chosen by `prompt_format_for(tokenizer)`; `prompts_for` rewrites the datasets):

    few_shot          FEW_SHOT_EXAMPLES solved questions of the level (the first training questions, never held
                      out), each answered with its worked line, then the question:
                          Question: What is 12 + 34?\\nAnswer: 12 + 34 = 46\\n\\n ...
                          Question: What is 47 + 38?\\nAnswer:
    few_shot_short    the same examples answered with the number alone ("Answer: 46")
    question_answer   "Question: What is 47 + 38?\\nAnswer:" alone

and, since the model goes on after its answer ("Answer: 47 + 38 = 85\\n\\nQuestion: ..."), the reward reads the
answer line: R = [ number on the completion's first line == answer ] (final_number with the dataset column
answer_first_line = True, rewards.py: the number after the line's last "=", else its first number). few_shot is the
one chosen (BASE_FORMAT; each format's accuracy: docs/models.md).

Expert traces (`train_dataset(expert_traces=True)`, the CLI's `--expert_traces true`): the training split gains the
column EXPERT_COLUMN, each question's worked line in the style of the few-shot answers,

    expert_answer = "47 + 38 = 85"          (the task's own label, `answer`, written as a worked line)

for the methods that read expert answers (CHORD's SFT term and LUFFY's off-policy traces, `expert_column`): the
label as a trace, no information beyond `answer`. Off by default; the held-out split never has it.

With a calculator (`chat_arithmetic_calculator`: the easy level's questions, `calculator=True`): each rollout runs
in the environment of tasks/calculator.py (TRL's `environment_factory`), the model may call `calculate(expression)`
once (`max_tool_calling_iterations` 1) and answers after its reply, the tokenizer renders the tool (TRL's Qwen2.5
tool template, `use_tool_template`), the reward reads the model's turns only, and the held-out evaluation runs the
tool round greedily (tool_evaluation.py); completions hold 160 tokens (the call, the reply and the answer). Its
expert traces (`--expert_traces true`) are the first turn's call on the question's expression,
'<tool_call>\n{"name": "calculate", "arguments": {"expression": "47 + 38"}}\n</tool_call>': the call's format and
the question's own expression, for an SFT term (CHORD's) that teaches a model that never calls the tool to call it.

The default policy is the packaged SmolLM2-135M-Instruct (`smollm2-135m-instruct`, see gguf_checkpoint.py);
`preset()` holds the hyperparameters chosen on one GPU. How the levels were chosen: docs/benchmarks.md, "The real
model".
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from datasets import Dataset

from .calculator import Calculator, tool_call_text, use_tool_template
from .rewards import final_number_reward

Question = tuple[int, ...]

PROMPT_FORMATS = ("chat", "few_shot", "few_shot_short", "question_answer")
BASE_FORMAT = "few_shot"  # the base-model format a tokenizer without a chat template gets (docs/models.md)
FEW_SHOT_EXAMPLES = 3
ANSWER_CUE = "Answer:"
EXPERT_COLUMN = "expert_answer"  # the worked-line traces of `train_dataset(expert_traces=True)`
CALCULATOR_COMPLETION_LENGTH = 160


@dataclass(frozen=True)
class ChatArithmeticTask:
    """Questions over two-digit operands joined by `signs`: 'What is a + b?' (terms=2, signs ("+",)), 'What is
    a - b?' (terms=2, signs ("-",): a ≥ b, so answers are ≥ 0) or 'What is a + b - c?' (terms=3, signs ("+", "-"))."""

    name: str
    terms: int
    num_train: int
    num_heldout: int
    level: str
    seed: int = 1234
    description: str = ""
    signs: tuple[str, ...] = ("+", "-")
    calculator: bool = False  # the calculator tool in each rollout (module docstring)

    reward = staticmethod(final_number_reward)
    reward_name = "final_number"
    default_model = "smollm2-135m-instruct"

    @property
    def max_completion_length(self) -> int:
        return CALCULATOR_COMPLETION_LENGTH if self.calculator else 64

    @property
    def environment_factory(self):
        """TRL's `environment_factory` for this task's rollouts: the calculator, or None."""
        return Calculator if self.calculator else None

    def tokenizer_for_tools(self, tokenizer):
        """The tokenizer with the tool template when the task has a calculator, else as it is."""
        return use_tool_template(tokenizer) if self.calculator else tokenizer

    def __post_init__(self):
        if self.terms not in (2, 3):
            raise ValueError(f"terms: 2 (a + b) or 3 (a + b - c), got {self.terms}.")
        if len(self.signs) < self.terms - 1 or not set(self.signs) <= {"+", "-"}:
            raise ValueError(f"signs: one '+' or '-' between each two of the {self.terms} operands, got {self.signs}.")

    @staticmethod
    def expression(question: Question, signs: tuple[str, ...] = ("+", "-")) -> str:
        text = str(question[0])
        for sign, operand in zip(signs, question[1:]):
            text += f" {sign} {operand}"
        return text

    @classmethod
    def prompt(cls, question: Question, signs: tuple[str, ...] = ("+", "-")) -> str:
        return f"What is {cls.expression(question, signs)}?"

    @staticmethod
    def answer(question: Question, signs: tuple[str, ...] = ("+", "-")) -> int:
        value = question[0]
        for sign, operand in zip(signs, question[1:]):
            value += operand if sign == "+" else -operand
        return value

    @property
    def ordered_difference(self) -> bool:
        """a - b with a ≥ b: the questions are the ordered pairs, so no answer is negative."""
        return self.terms == 2 and self.signs[0] == "-"

    @cached_property
    def _split(self) -> tuple[list[Question], list[Question]]:
        ordered = [(a, b) for a in range(10, 100) for b in range(10, a + 1)] if self.ordered_difference else None
        pool_size = len(ordered) if ordered else 90**self.terms
        if self.num_train + self.num_heldout > pool_size:
            raise ValueError(f"num_train + num_heldout: more than the {pool_size} distinct questions; lower them.")
        rng = random.Random(self.seed)
        chosen = rng.sample(range(pool_size), self.num_train + self.num_heldout)
        if ordered:
            questions = [ordered[index] for index in chosen]
        else:
            questions = [tuple(10 + index // 90**k % 90 for k in range(self.terms)) for index in chosen]
        return questions[self.num_heldout :], questions[: self.num_heldout]

    def expert_answer(self, question: Question) -> str:
        """The question's label as a worked line, "47 + 38 = 85" (the few-shot answers' style; module docstring);
        with a calculator, the first turn's call of it on the question's expression, as the tool template renders a
        call (`tool_call_text`)."""
        if self.calculator:
            return tool_call_text("calculate", {"expression": self.expression(question, self.signs)})
        return f"{self.expression(question, self.signs)} = {self.answer(question, self.signs)}"

    def _dataset(self, questions: list[Question], expert_traces: bool = False) -> Dataset:
        columns = {
            "prompt": [self.prompt(q, self.signs) for q in questions],
            "answer": [str(self.answer(q, self.signs)) for q in questions],
        }
        if expert_traces:
            columns[EXPERT_COLUMN] = [self.expert_answer(q) for q in questions]
        return Dataset.from_dict(columns)

    def train_dataset(self, prompt_format: str = "chat", expert_traces: bool = False) -> Dataset:
        """Columns `prompt` (a plain question, which the CLI wraps in the chat template, or in a base-model format:
        `prompt_format`) and `answer` (and `answer_first_line` in a base-model format); with `expert_traces` also
        EXPERT_COLUMN, the label as a worked line (module docstring)."""
        return self.in_format(self._dataset(self._split[0], expert_traces), prompt_format)

    def heldout_dataset(self, prompt_format: str = "chat") -> Dataset:
        return self.in_format(self._dataset(self._split[1]), prompt_format)

    # ------------------------------------------------------------------ base-model prompt formats
    def few_shot_header(self, worked: bool = True) -> str:
        """The solved examples that open a few-shot prompt: the level's first FEW_SHOT_EXAMPLES training questions
        (never held out), each "Question: …\\nAnswer: a + b = N" (`worked`) or "…\\nAnswer: N", and a blank line."""
        return "".join(
            f"Question: {self.prompt(q, self.signs)}\n{ANSWER_CUE} "
            f"{self.expression(q, self.signs) + ' = ' if worked else ''}{self.answer(q, self.signs)}\n\n"
            for q in self._split[0][:FEW_SHOT_EXAMPLES]
        )

    def format_prompt(self, question_text: str, prompt_format: str) -> str:
        """A plain question ("What is 47 + 38?") in `prompt_format` (module docstring)."""
        if prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"prompt_format: one of {', '.join(PROMPT_FORMATS)}, got {prompt_format!r}.")
        if prompt_format == "chat":
            return question_text
        header = "" if prompt_format == "question_answer" else self.few_shot_header(prompt_format == "few_shot")
        return f"{header}Question: {question_text}\n{ANSWER_CUE}"

    def in_format(self, dataset: Dataset, prompt_format: str) -> Dataset:
        """The task's `dataset` (plain questions) with its prompts in `prompt_format`; a base-model format adds the
        column `answer_first_line` (True), which makes the final_number reward read the answer line."""
        if prompt_format == "chat":
            return dataset
        self.format_prompt("", prompt_format)  # a bad name fails here, in one line, not inside map
        formatted = dataset.map(lambda row: {"prompt": self.format_prompt(row["prompt"], prompt_format)})
        return formatted.add_column("answer_first_line", [True] * len(formatted))

    @staticmethod
    def prompt_format_for(tokenizer) -> str:
        """"chat" when the tokenizer has a chat template (the CLI renders the question with it), else BASE_FORMAT."""
        return "chat" if getattr(tokenizer, "chat_template", None) else BASE_FORMAT

    def prompts_for(
        self, train: Dataset, heldout: Dataset | None, tokenizer, log: Callable = print
    ) -> tuple[Dataset, Dataset | None]:
        """This task's training and held-out datasets (plain questions; held-out may be None) as this tokenizer's
        model should be asked: unchanged for a chat model, in BASE_FORMAT for a tokenizer without a chat template
        (a line says so)."""
        prompt_format = self.prompt_format_for(tokenizer)
        if prompt_format == "chat":
            return train, heldout
        log(f"{self.name}: the tokenizer has no chat template (a base model), so the questions are asked in the "
            f"{prompt_format} format ({FEW_SHOT_EXAMPLES} solved examples, then 'Question: …' and 'Answer:') and the "
            "reward reads the number on the answer line")
        based_heldout = None if heldout is None else self.in_format(heldout, prompt_format)
        return self.in_format(train, prompt_format), based_heldout

    def preset(self) -> dict:
        """What differs on this task from the built-in tasks' defaults (`arguments.quickstart_preset`: LoRA r 16 on
        every linear layer, temperature 1, β = 0); measured on one GPU, any field can be overridden."""
        return {
            "model_name_or_path": self.default_model,
            "learning_rate": 2e-4,
            "max_steps": 40,
            "per_device_train_batch_size": 32,  # × 4 accumulated = 128 completions (16 prompts × 8) a step
            "gradient_accumulation_steps": 4,  # one micro-batch of 128 rows peaks at 12 GiB (the logits), 32 at 3.7
            "logging_steps": 1,
            "eval_every_steps": 20,
            **({"max_tool_calling_iterations": 1} if self.calculator else {}),
        }


CHAT_ARITHMETIC = ChatArithmeticTask(
    "chat_arithmetic", terms=2, num_train=6000, num_heldout=500, level="easy", signs=("+",),
    description="chat model, 'What is a + b?' with two-digit operands, last-number reward (easy)",
)
CHAT_ARITHMETIC_CALCULATOR = ChatArithmeticTask(
    "chat_arithmetic_calculator", terms=2, num_train=6000, num_heldout=500, level="easy", signs=("+",),
    calculator=True,
    description="chat_arithmetic's questions with a calculator tool in each rollout (one call, then the answer)",
)
CHAT_ARITHMETIC_MEDIUM = ChatArithmeticTask(
    "chat_arithmetic_medium", terms=2, num_train=3500, num_heldout=500, level="medium", signs=("-",),
    description="chat model, 'What is a - b?' with two-digit operands, a ≥ b, last-number reward (medium)",
)
CHAT_ARITHMETIC_HARD = ChatArithmeticTask(
    "chat_arithmetic_hard", terms=3, num_train=20000, num_heldout=500, level="hard",
    description="chat model, 'What is a + b - c?' with two-digit operands, last-number reward (hard)",
)
