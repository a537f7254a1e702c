"""Greedy rollouts with one tool round: a scripted policy's calls are run on each row's calculator, the replies
rendered after turn 1 and turn 2 decoded within the completion budget (a reply that does not fit ends the rollout,
as in TRL); the completions are TRL's messages and their ids hold both turns and the replies; the reward reads the
model's turns only, so a tool's right number is not the model's answer; the held-out accuracy counts the rollouts."""

import pytest
import torch

from tests.packaged_model import needs_packaged_model
from trl_zoo.tasks.calculator import Calculator, use_tool_template
from trl_zoo.tasks.evaluation import greedy_evaluation
from trl_zoo.tasks.rewards import completion_text, final_number_reward
from trl_zoo.tasks.tool_evaluation import environment_tools, greedy_tool_completions


def _call(expression: str) -> str:
    return f'<tool_call>\n{{"name": "calculate", "arguments": {{"expression": "{expression}"}}}}\n</tool_call>'


# question -> (turn 1, turn 2 after the tool's reply)
SCRIPT = {
    "What is 47 + 38?": (_call("47 + 38"), "It is 85."),
    "What is 20 + 22?": ("42", None),  # answers at once
    "What is 11 + 12?": (_call("11 ** 12"), "Then 23."),  # the tool has no value for it: an error reply
    "What is 30 + 31?": (_call("30 + 31"), None),  # turn 2 says nothing: the tool's 61 is not the model's answer
}
ANSWERS = ["85", "42", "23", "61"]


class ScriptedPolicy(torch.nn.Module):
    """Decodes the script's turn for the question in each prompt (turn 2 once a tool reply is in it)."""

    def __init__(self, tokenizer):
        super().__init__()
        self.tokenizer = tokenizer
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.turn_two_prompts = []

    def generate(self, input_ids, attention_mask, max_new_tokens, pad_token_id, eos_token_id, **decoding):
        assert decoding["do_sample"] is False
        rows = []
        for row in input_ids.tolist():
            text = self.tokenizer.decode(row, skip_special_tokens=False)
            first, second = next(turns for question, turns in SCRIPT.items() if question in text)
            replied = "<tool_response>" in text
            if replied:
                self.turn_two_prompts.append(text)
            turn = (second or "") if replied else first
            rows.append(self.tokenizer(turn, add_special_tokens=False)["input_ids"][:max_new_tokens - 1]
                        + [eos_token_id])
        width = max(len(row) for row in rows)
        new = torch.tensor([row + [pad_token_id] * (width - len(row)) for row in rows])
        return torch.cat([input_ids, new], dim=1)


@pytest.fixture
def tokenizer():
    from transformers import AutoTokenizer

    from trl_zoo.io.gguf_checkpoint import policy_path

    return use_tool_template(AutoTokenizer.from_pretrained(policy_path("smollm2-135m-instruct")))


def _prompts():
    return [[{"role": "user", "content": question}] for question in SCRIPT]


def test_the_environments_tools_are_trls():
    assert [tool.__name__ for tool in environment_tools(Calculator())] == ["calculate"]


def test_the_reward_reads_the_models_turns_not_the_tools_reply():
    call = {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
        "name": "calculate", "arguments": {"expression": "30 + 31"}}}]}
    silent = [call, {"role": "tool", "name": "calculate", "content": "61"}]
    answered = [*silent, {"role": "assistant", "content": "So 61."}]
    assert completion_text(answered) == "\nSo 61."
    assert final_number_reward([silent, answered], answer=["61", "61"]) == [0.0, 1.0]


@needs_packaged_model
def test_each_call_is_run_on_its_rows_calculator_and_turn_two_follows_the_reply(tokenizer):
    policy = ScriptedPolicy(tokenizer)
    completions, ids = greedy_tool_completions(policy, tokenizer, _prompts(), 96, Calculator,
                                               {"answer": ANSWERS}, batch_size=3)
    assert [[message["role"] for message in rollout] for rollout in completions] == [
        ["assistant", "tool", "assistant"], ["assistant"], ["assistant", "tool", "assistant"],
        ["assistant", "tool", "assistant"],
    ]
    assert completions[0][0]["tool_calls"][0]["function"]["arguments"] == {"expression": "47 + 38"}
    assert completions[0][1]["content"] == "85" and completions[0][2]["content"] == "It is 85."
    assert completions[2][1]["content"].startswith("error: only integers")
    assert completions[3][1]["content"] == "61" and completions[3][2]["content"] == ""  # an empty turn, as in TRL
    assert all(text.endswith("<|im_start|>assistant\n") and "<tool_response>" in text
               for text in policy.turn_two_prompts)
    assert len(policy.turn_two_prompts) == 3  # rows with a reply; row 1 repeats its turn 1 (same batches for all)
    decoded = tokenizer.decode(ids[0], skip_special_tokens=False)
    assert decoded.startswith("<tool_call>") and "<tool_response>\n85\n</tool_response>" in decoded
    assert decoded.endswith("It is 85.<|im_end|>")
    assert final_number_reward(completions, answer=ANSWERS) == [1.0, 1.0, 1.0, 0.0]


@needs_packaged_model
def test_a_reply_that_does_not_fit_the_budget_ends_the_rollout_after_turn_one(tokenizer):
    first = len(tokenizer(_call("47 + 38"), add_special_tokens=False)["input_ids"]) + 1
    completions, ids = greedy_tool_completions(ScriptedPolicy(tokenizer), tokenizer, _prompts()[:1], first + 3,
                                               Calculator, {"answer": ANSWERS[:1]})
    assert [message["role"] for message in completions[0]] == ["assistant"] and len(ids[0]) == first


@needs_packaged_model
def test_the_heldout_accuracy_counts_the_rollouts_with_their_tool_round(tokenizer):
    result = greedy_evaluation(ScriptedPolicy(tokenizer), tokenizer, _prompts(), 96, final_number_reward,
                               {"answer": ANSWERS}, environment_factory=Calculator)
    assert result.accuracy == 0.75
    without = greedy_evaluation(ScriptedPolicy(tokenizer), tokenizer, _prompts(), 96, final_number_reward,
                                {"answer": ANSWERS})
    assert without.accuracy == 0.25  # one turn each: only row 1's answer, the calls are not numbers
