"""GiGPO (`advantage_estimator="gigpo"`, arXiv:2505.10978): its advantages against a transcription of the reference
code on random batches, TRL's multi-turn layout read as turns, one training step of a two-turn environment whose
per-token advantages equal the closed form, and the refused settings.

The reference is verl-agent's `gigpo/core_gigpo.py` (`compute_gigpo_outcome_advantage`, `episode_norm_reward`,
`build_step_group` with `enable_similarity=False`, `step_norm_reward`, `compute_step_discounted_returns`), read in the
fork zhengxuyu/verl-agent at commit 3d91c9b31841c98f95c8e60d248d387029fb721f, transcribed below with its batch layout:
one row per step (turn), `index` the prompt's group, `traj_index` the trajectory, the episode's mean and std over the
group's trajectories (`compute_mean_std_cross_steps=False`, the paper's Eq. 3).
"""

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset

import trl_zoo
from tests import tiny
from tests.trl_internals import AfterGenerationBatch, replace_decoding
from trl_zoo.advantages import AdvantageInputs, Turns
from trl_zoo.components.turns import environment_turn_rewards, turns_of

GIGPO = trl_zoo.ADVANTAGES.get("gigpo").fn


def args(mode="mean_norm", gamma=0.95, weight=1.0, epsilon=1e-6):
    return SimpleNamespace(advantage_std_unbiased=True, advantage_epsilon=epsilon, gigpo_mode=mode,
                           gigpo_gamma=gamma, gigpo_step_weight=weight)


# ---------------------------------------------------------------------------------------------------- the reference
def reference_discounted_returns(step_rewards, traj_index, gamma):
    """`compute_step_discounted_returns`: per trajectory, from its last step back."""
    returns = [0.0] * len(step_rewards)
    for uid in dict.fromkeys(traj_index):
        rows = [i for i, t in enumerate(traj_index) if t == uid]
        running = 0.0
        for i in reversed(rows):
            running = step_rewards[i] + gamma * running
            returns[i] = running
    return returns


def reference_norm(scores, index, remove_std, epsilon, seen_key=None):
    """`episode_norm_reward` / `step_norm_reward`: each score minus its index's mean (÷ its std + ε unless
    remove_std); `seen_key` counts a (index, trajectory) pair once, as `compute_mean_std_cross_steps=False`."""
    grouped, seen = defaultdict(list), set()
    for i, score in enumerate(scores):
        if seen_key is not None and (index[i], seen_key[i]) in seen:
            continue
        grouped[index[i]].append(score)
        if seen_key is not None:
            seen.add((index[i], seen_key[i]))
    out = []
    for i, score in enumerate(scores):
        values = torch.tensor(grouped[index[i]], dtype=torch.float64)
        mean, std = values.mean(), (values.std() if len(values) > 1 else torch.tensor(1.0, dtype=torch.float64))
        out.append(float(score - mean if remove_std else (score - mean) / (std + epsilon)))
    return out


def reference_gigpo(episode_rewards, step_rewards, anchor_obs, index, traj_index, gamma, weight, mode, epsilon):
    """`compute_gigpo_outcome_advantage` on step rows: episode + weight · step advantage, one value per row."""
    remove_std = mode == "mean_norm"
    episode = reference_norm(episode_rewards, index, remove_std, epsilon, seen_key=traj_index)
    step_groups = [(index[i], anchor_obs[i]) for i in range(len(index))]  # build_step_group: identical obs per index
    returns = reference_discounted_returns(step_rewards, traj_index, gamma)
    step = reference_norm(returns, step_groups, remove_std, epsilon)
    return [e + weight * s for e, s in zip(episode, step)]


def random_batch(seed, groups=3, size=4, width=12):
    """Trajectories of 1–3 turns, their states drawn from a few (so that turns share anchor states), the environment's
    turn rewards and the trajectory rewards continuous."""
    generator = torch.Generator().manual_seed(seed)
    count = groups * size
    turns = torch.randint(1, 4, (count,), generator=generator)
    states = torch.full((count, 3), -1, dtype=torch.long)
    environment = torch.full((count, 3), float("nan"), dtype=torch.float64)
    token_turns = torch.full((count, width), -1, dtype=torch.long)
    for i, k in enumerate(turns.tolist()):
        states[i, :k] = torch.randint(0, 3, (k,), generator=generator)
        states[i, 0] = 0 if i % size else states[i, 0]  # most rows start from the prompt's state
        environment[i, :k] = torch.rand(k, generator=generator, dtype=torch.float64) - 0.5
        for turn in range(k):  # four tokens a turn: three of the model's, one of the reply after it
            token_turns[i, 4 * turn : 4 * turn + 3] = turn
    rewards = torch.rand(count, generator=generator, dtype=torch.float64)
    mask = (token_turns >= 0).double()
    turn_data = Turns(token_turns=token_turns, states=states, rewards=environment)
    return AdvantageInputs(rewards, size, mask=mask, turns=turn_data)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_the_reference_on_random_batches(seed, mode):
    inputs = random_batch(seed)
    gamma, weight, epsilon = 0.9, 0.7, 1e-6
    got = GIGPO(inputs, args(mode, gamma, weight, epsilon))

    index, traj_index, anchor_obs, episode_rewards, step_rewards, where = [], [], [], [], [], []
    for i in range(inputs.rewards.numel()):
        k = int(inputs.turns.counts[i])
        turn_rewards = inputs.turns.rewards[i, :k].tolist()
        turn_rewards[-1] += float(inputs.rewards[i])  # the trajectory's reward on its last turn
        for turn in range(k):
            index.append(i // inputs.num_generations)
            traj_index.append(i)
            anchor_obs.append(int(inputs.turns.states[i, turn]))
            episode_rewards.append(sum(turn_rewards))  # verl-agent's episode reward: the sum of its step rewards
            step_rewards.append(turn_rewards[turn])
            where.append((i, 4 * turn))
    expected = reference_gigpo(episode_rewards, step_rewards, anchor_obs, index, traj_index, gamma, weight, mode,
                               epsilon)
    for (i, t), value in zip(where, expected):
        assert got[i, t : t + 3].tolist() == pytest.approx([value] * 3, rel=1e-9, abs=1e-9)
        assert got[i, t + 3].item() == 0.0  # the reply's token
    assert len(set(anchor_obs)) > 1 and any(s > 0 for s in step_rewards)  # the batch has anchor groups to tell apart


def test_without_turns_every_completion_is_one_turn_from_its_prompt():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25, 2.0, 2.0, 1.0, 3.0])
    got = GIGPO(AdvantageInputs(rewards, 4, mask=torch.ones(8, 3)), args(weight=0.5))
    centred = rewards - rewards.view(2, 4).mean(1).repeat_interleave(4)
    torch.testing.assert_close(got, (1.5 * centred).unsqueeze(1).expand(8, 3))


def test_an_unscorable_trajectory_leaves_the_others_means():
    inputs = random_batch(0)
    rewards = inputs.rewards.clone()
    rewards[1] = float("nan")
    got = GIGPO(AdvantageInputs(rewards, 4, mask=inputs.mask, turns=inputs.turns), args())
    assert got[1].isnan().any() and torch.isfinite(got[[0, 2, 3]]).all()


# ---------------------------------------------------------------------------------------------------- TRL's layout
def test_turns_of_trls_layout():
    """Two rows: a tool reply (tool mask 0) between two turns, and a single turn; right padding."""
    completion_ids = torch.tensor([[5, 6, 7, 8, 9, 10, 0], [5, 11, 12, 0, 0, 0, 0]])
    completion_mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0, 0]])
    tool_mask = torch.tensor([[1, 1, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]])
    prompt_ids, prompt_mask = torch.tensor([[0, 3, 4], [0, 3, 4]]), torch.tensor([[0, 1, 1], [0, 1, 1]])
    given, counts = torch.tensor([[0.5, 0.0], [0.0, 0.0]]), torch.tensor([1, 0])
    turns = turns_of(prompt_ids, prompt_mask, completion_ids, completion_mask, tool_mask, given, counts)
    assert turns.token_turns.tolist() == [[0, 0, -1, -1, 1, 1, -1], [0, 0, 0, -1, -1, -1, -1]]
    assert turns.states.tolist() == [[0, 1], [0, -1]]  # one prompt, the reply [7, 8]
    assert turns.rewards[0].tolist() == [0.5, 0.0] and turns.rewards[1, 0].item() == 0.0
    assert turns.rewards[1, 1].isnan()
    with pytest.raises(ValueError, match=r"^turn_rewards: rollout 1 has 1 turns but its environment lists 2 "):
        turns_of(prompt_ids, prompt_mask, completion_ids, completion_mask, tool_mask, given, torch.tensor([1, 2]))


class Scores:
    """An environment stand-in that keeps `turn_rewards`."""

    def __init__(self, turn_rewards):
        self.turn_rewards = turn_rewards


@pytest.mark.parametrize("value, problem", [
    (0.5, "holds 0.5 (float), not a list; keep a list of one number per turn (None: a turn it cannot score), e.g. "
          "[1.0]."),
    ("0.5", "holds '0.5' (str), not a list"),
    ({"look": 0.5}, "holds {'look': 0.5} (dict), not a list"),
    (["0.5"], "gives turn 0 '0.5' (str), not a number; keep a list of one number per turn"),
    ([0.5, float("inf")], "gives turn 1 the reward inf; give a finite number, or None for a turn it cannot score."),
    ([float("-inf")], "gives turn 0 the reward -inf; give a finite number"),
    ([float("nan")], "gives turn 0 the reward nan; give a finite number, or None"),
    ([-2e15], "gives turn 0 the reward -2e+15; rewards beyond ±1e+15 overflow the group std in float32"),
])
def test_turn_rewards_that_are_not_a_list_of_rewards_are_one_line_naming_the_rollout_and_environment(value, problem):
    """Before: a bare TypeError or ValueError from float(), or ±inf and 1e30 read as rewards."""
    environments = [Scores([0.5, None]), Scores(value)]
    with pytest.raises(ValueError) as error:
        environment_turn_rewards(environments, 2, "cpu", first_row=4)  # this process's rows 4 and 5 of the batch
    assert str(error.value).startswith(f"turn_rewards: rollout 5's environment (Scores) {problem}"), str(error.value)
    given, counts = environment_turn_rewards([Scores([0.5, None]), Scores((1, -0.25))], 2, "cpu")
    assert counts.tolist() == [2, 2] and given[0, 0].item() == 0.5 and given[0, 1].isnan()
    assert given[1].tolist() == [1.0, -0.25]


# ---------------------------------------------------------------------------------------------------- end to end
# A chat template for the tiny character tokenizer (as tests/test_environments.py's) and a response template that
# reads "look." or "peek." as a call of that tool without arguments.
TOOL_TEMPLATE = (
    "{%- for m in messages %}{{ m.role[0] }}:{{ m.content }}{%- if m.tool_calls is defined %}"
    "{%- for c in m.tool_calls %}{{ c.function.name }}{%- for k, v in c.function.arguments.items() %} {{ k }} {{ v }}"
    "{%- endfor %}.{%- endfor %}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}a:{%- endif %}"
)
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "a:",
    "fields": {
        "tool_calls": {
            "open_pattern": r"(?P<name>look|peek)",
            "close_pattern": r"\.",
            "repeats": True,
            "content": "text",
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": {}}},
        },
        "content": {"close_pattern": r"<eos>\s*", "content": "text"},
    },
}
# Each group of four: rows 0 and 1 look (reply "4"), row 2 peeks (reply "2"), row 3 answers at once; after the
# reply rows 0 and 2 answer 42, row 1 answers 7.
FIRST_TURNS = ["look.", "look.", "peek.", "42"]
SECOND_TURNS = ["42", "7", "42"]


class LookOrPeek:
    """Two tools that answer differently; looking earns 0.5 for its turn, peeking −0.5 (`turn_rewards`)."""

    def reset(self, **kwargs):
        self.turn_rewards = []
        return "12+30="

    def look(self) -> str:
        """Look at the sum.

        Returns:
            A hint.
        """
        self.turn_rewards.append(0.5)
        return "4"

    def peek(self) -> str:
        """Peek at the sum.

        Returns:
            A hint.
        """
        self.turn_rewards.append(-0.5)
        return "2"


def answer_reward(completions, **kwargs):
    return [1.0 if completion[-1]["content"] == "42" else 0.0 for completion in completions]


class Recording(AfterGenerationBatch, trl_zoo.GRPOTrainer):
    def after_generation_batch(self, batch):
        self.batch = batch


def scripted_decoding(tokenizer):
    """The model's turns as FIRST_TURNS then SECOND_TURNS, by their place in the batch (TRL asks for the first turns of
    every row, then for the second turns of the rows that called a tool, in row order)."""

    def encoded(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    def decode(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        turns = FIRST_TURNS if num_generations > 1 else SECOND_TURNS
        return [encoded(turns[i % len(turns)]) for i in range(len(prompt_ids))], None

    return decode


def closed_form(gamma=0.95):
    """Each row's (advantage of turn 0, advantage of turn 1 or None), written out for one group."""
    turn_rewards = [[0.5, 1.0], [0.5, 0.0], [-0.5, 1.0], [1.0]]  # the environment's, the answer's on the last turn
    episode = [sum(r) for r in turn_rewards]
    episode = [e - sum(episode) / 4 for e in episode]
    first = [r[0] + gamma * r[1] if len(r) == 2 else r[0] for r in turn_rewards]  # G_0; all four start from the prompt
    first = [g - sum(first) / 4 for g in first]
    second = [1.0 - (1.0 + 0.0) / 2, 0.0 - (1.0 + 0.0) / 2, 0.0]  # G_1: rows 0 and 1 after "4", row 2 alone after "2"
    return [(episode[i] + first[i], episode[i] + second[i] if i < 3 else None) for i in range(4)]


def trained_two_turn_batch(environment=LookOrPeek, **estimator) -> dict:
    """The generation batch of one training step on the scripted two-turn `environment`, the estimator's fields
    given."""
    tokenizer = tiny.tokenizer()
    tokenizer.chat_template, tokenizer.response_template = TOOL_TEMPLATE, RESPONSE_TEMPLATE
    try:
        torch.manual_seed(0)
        config = trl_zoo.GRPOConfig(**tiny.config_kwargs(max_steps=1, max_completion_length=32), **estimator)
        trainer = Recording(model=tiny.model(), args=config, processing_class=tokenizer, reward_funcs=answer_reward,
                            train_dataset=Dataset.from_dict({"environment": ["sum"] * 8}),
                            environment_factory={"sum": environment})
        replace_decoding(trainer, scripted_decoding(tokenizer))
        trainer.train()
    finally:
        tokenizer.chat_template = None
        del tokenizer.response_template
    return trainer.batch


def test_one_training_step_of_a_two_turn_environment_has_the_closed_form_per_token(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    batch = trained_two_turn_batch(advantage_estimator="gigpo")
    advantages, tool_mask, mask = batch["advantages"], batch["tool_mask"], batch["completion_mask"]
    assert advantages.shape == mask.shape
    for row in range(8):
        first, second = closed_form()[row % 4]
        model_tokens = (mask * tool_mask)[row].bool()
        reply = (mask * (1 - tool_mask))[row].bool()
        assert (advantages[row][~model_tokens] == 0).all()
        if second is None:
            assert not reply.any()
            assert advantages[row][model_tokens].tolist() == pytest.approx([first] * int(model_tokens.sum()))
            continue
        start = int(reply.nonzero()[0])
        end = int(reply.nonzero()[-1]) + 1
        turn0, turn1 = model_tokens[:start], model_tokens[end:]
        assert int(turn0.sum()) == len("look.") + 1 and int(turn1.sum()) == len(SECOND_TURNS[row % 4]) + 1
        assert advantages[row][:start][turn0].tolist() == pytest.approx([first] * int(turn0.sum()))
        assert advantages[row][end:][turn1].tolist() == pytest.approx([second] * int(turn1.sum()))
    assert closed_form()[0] == pytest.approx((0.625 + 0.6, 0.625 + 0.5))  # the closed form's own numbers


class InfiniteLook(LookOrPeek):
    def look(self) -> str:
        """Look at the sum.

        Returns:
            A hint.
        """
        self.turn_rewards.append(float("inf"))
        return "4"


def test_an_infinite_turn_reward_stops_the_step_naming_the_rollout(monkeypatch):
    """Before, the generic non-finite guard named neither `turn_rewards` nor the rollout."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    with pytest.raises(ValueError, match=r"^turn_rewards: rollout 0's environment \(InfiniteLook\) gives turn 0 the "
                                         r"reward inf"):
        trained_two_turn_batch(InfiniteLook, advantage_estimator="gigpo")


# ---------------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "setting, message",
    [
        (dict(multi_objective_aggregation="normalize_then_sum"), r"^multi_objective_aggregation: 'normalize_then"),
        (dict(dynamic_sampling="resample"), r"^dynamic_sampling: 'resample' keeps or regroups rows"),
    ],
)
def test_refused_settings(setting, message):
    with pytest.raises(ValueError, match=message):
        trl_zoo.GRPOConfig(**tiny.config_kwargs(), advantage_estimator="gigpo", **setting)
