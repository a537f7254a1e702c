"""MT-GRPO (`advantage_estimator="mt_grpo"`, arXiv:2505.11821): its advantages against a transcription of the
reference code on random batches in TRL's multi-turn layout, the estimator without turns, one training step of a
two-turn environment whose per-token advantages equal the closed form, and the refused settings and rollouts.

The reference is SiliangZeng/Multi-Turn-RL-Agent, `verifiers/trainers/mt_grpo_env_trainer.py`
(`_find_result_positions`, `_assign_advantages`, `turn_advantage_coef=1.0`) with `_compute_normalized_advantages` of
`verifiers/trainers/grpo_env_trainer.py`, read at commit 7dbdd08bdb27810019bc1511dbd0af3c7cfaac7a (the trainer last
changed in 127dda5f8c20be62d7d483ccbd65841b65956162), transcribed below with its batch layout: `completion_mask` 1 on
the model's tokens, 0 on the environment's messages and padding; `completion_messages` the rollout's chat, the
environment's messages as role "user", a tool's result holding `<result>`; the turn, outcome and combined rewards
(the turn and outcome reward functions' weighted sums, and both together) one number a rollout each. Its std is
torch's unbiased one and its ε 1e-4, so the estimator runs here with `advantage_std_unbiased=True`,
`advantage_epsilon=1e-4`.
"""

import statistics
from types import SimpleNamespace

import pytest
import torch

import trl_zoo
from tests import tiny
from tests.test_gigpo import FIRST_TURNS, SECOND_TURNS, LookOrPeek, trained_two_turn_batch
from trl_zoo.advantages import AdvantageInputs, Turns
from trl_zoo.components.turns import turns_of

MT_GRPO = trl_zoo.ADVANTAGES.get("mt_grpo").fn
GRPO = trl_zoo.ADVANTAGES.get("grpo").fn


def args(coef=1.0, epsilon=1e-4, unbiased=True):
    return SimpleNamespace(advantage_std_unbiased=unbiased, advantage_epsilon=epsilon, scale_rewards="group",
                           mt_grpo_turn_advantage_coef=coef)


# ---------------------------------------------------------------------------------------------------- the reference
def reference_normalized_advantages(rewards, num_generations):
    """`_compute_normalized_advantages` (one process: the slice is the whole batch)."""
    mean_grouped_rewards = rewards.view(-1, num_generations).mean(dim=1)
    std_grouped_rewards = rewards.view(-1, num_generations).std(dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
    std_grouped_rewards = std_grouped_rewards.repeat_interleave(num_generations, dim=0)
    return (rewards - mean_grouped_rewards) / (std_grouped_rewards + 1e-4)


def reference_result_positions(completion_messages):
    """`_find_result_positions`: the index of the first environment message holding a tool's result, else −1."""
    result_segment_indices = []
    for messages in completion_messages:
        result_segment = -1
        for j, msg in enumerate(messages):
            if msg.get("role") == "assistant":
                if j + 1 < len(messages) and messages[j + 1].get("role") == "user":
                    if "<result>" in messages[j + 1].get("content", ""):
                        result_segment = j + 1
                        break
        result_segment_indices.append(result_segment)
    return result_segment_indices


def reference_assign_advantages(completion_mask, turn_advantages, outcome_advantages, combined_advantages,
                                result_segment_indices, turn_advantage_coef):
    """`_assign_advantages`: outcome + coef · turn before the first result, on a rollout with a result; else the
    combined advantage."""
    batch_size, seq_len = completion_mask.shape
    assigned_advantages = torch.zeros_like(completion_mask, dtype=torch.float32)

    def get_segment_boundaries(mask_row):
        boundaries = [0]
        for j in range(1, seq_len):
            if mask_row[j] != mask_row[j - 1]:
                boundaries.append(j)
        boundaries.append(seq_len)
        return boundaries

    for i in range(batch_size):
        result_segment = result_segment_indices[i]
        mask_row = completion_mask[i]
        outcome_adv_expanded = outcome_advantages[i] * torch.ones_like(mask_row, dtype=torch.float32)
        turn_adv_expanded = turn_advantages[i] * torch.ones_like(mask_row, dtype=torch.float32)
        combined_adv_expanded = combined_advantages[i] * torch.ones_like(mask_row, dtype=torch.float32)
        if result_segment > 0:
            segment_boundaries = get_segment_boundaries(mask_row)
            if result_segment < len(segment_boundaries):
                split_point = segment_boundaries[result_segment]
                before_result_mask = (torch.arange(seq_len) < split_point).float() * mask_row
                assigned_advantages[i] = (outcome_adv_expanded
                                          + turn_advantage_coef * turn_adv_expanded * before_result_mask)
            else:
                raise ValueError(f"Not enough segments found in completion {i}")
        else:
            assigned_advantages[i] = combined_adv_expanded
    return assigned_advantages


# ---------------------------------------------------------------------------------------------------- random batches
def random_rollouts(seed, groups=3, size=4, width=14):
    """TRL's tensors of `groups` × `size` rollouts, each calling a tool (turn 0, the reply, turn 1) or answering at
    once, of random lengths, and the same rollouts as the reference's messages; continuous outcome rewards, and turn
    rewards for the rollouts that called a tool and for some that did not (a turn reward function scores every
    rollout)."""
    generator = torch.Generator().manual_seed(seed)
    count = groups * size
    completion_ids = torch.zeros(count, width, dtype=torch.long)
    completion_mask = torch.zeros(count, width, dtype=torch.long)
    tool_mask = torch.ones(count, width, dtype=torch.long)
    called = torch.rand(count, generator=generator) < 0.6
    given_counts = torch.zeros(count, dtype=torch.long)
    messages = []
    for i in range(count):
        first, reply, second = (int(n) for n in torch.randint(1, 5, (3,), generator=generator))
        end = first + (reply + second if called[i] else 0)
        completion_ids[i, :end] = torch.randint(3, 20, (end,), generator=generator)
        completion_mask[i, :end] = 1
        if called[i]:
            tool_mask[i, first : first + reply] = 0
            messages.append([{"role": "assistant", "content": "call"}, {"role": "user", "content": "<result>r"},
                             {"role": "assistant", "content": "answer"}])
        else:
            messages.append([{"role": "assistant", "content": "answer"}])
        given_counts[i] = 1 if called[i] or torch.rand(1, generator=generator) < 0.5 else 0
    turn_rewards = torch.rand(count, generator=generator) - 0.5
    turn_rewards = torch.where(given_counts > 0, turn_rewards, 0.0)
    outcome_rewards = torch.rand(count, generator=generator)
    prompt_ids, prompt_mask = torch.ones(count, 3, dtype=torch.long), torch.ones(count, 3, dtype=torch.long)
    turns = turns_of(prompt_ids, prompt_mask, completion_ids, completion_mask, tool_mask,
                     turn_rewards.unsqueeze(1), given_counts)
    inputs = AdvantageInputs(outcome_rewards, size, mask=completion_mask.float(), turns=turns)
    return inputs, completion_mask * tool_mask, messages, turn_rewards, called


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("coef", [1.0, 0.5])
def test_the_reference_on_random_batches(seed, coef):
    inputs, model_mask, messages, turn_rewards, called = random_rollouts(seed)
    got = MT_GRPO(inputs, args(coef))

    outcome_rewards = inputs.rewards
    combined_rewards = turn_rewards + outcome_rewards
    turn, outcome, combined = (reference_normalized_advantages(rewards, 4)
                               for rewards in (turn_rewards, outcome_rewards, combined_rewards))
    expected = reference_assign_advantages(model_mask, turn, outcome, combined, reference_result_positions(messages),
                                           coef)
    model = model_mask.bool()
    torch.testing.assert_close(got[model], expected[model], rtol=1e-5, atol=1e-5)
    assert (got[~model] == 0).all()  # tool replies and padding
    # the batch tells the two kinds of rollout apart, and turn 0 of a two-turn one differs from its turn 1
    assert 0 < int(called.sum()) < called.numel()
    first = torch.stack([got[i][inputs.turns.token_turns[i] == 0][0] for i in called.nonzero().flatten()])
    second = torch.stack([got[i][inputs.turns.token_turns[i] == 1][0] for i in called.nonzero().flatten()])
    assert (first - second).abs().max() > 0.1


def test_without_turns_every_completion_is_one_turn_and_the_advantage_is_grpos():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25, 2.0, 2.0, 1.0, 3.0])
    mask = torch.tensor([[1.0, 1.0, 0.0]] * 8)
    got = MT_GRPO(AdvantageInputs(rewards, 4, mask=mask), args(coef=0.5))
    grpo = GRPO(AdvantageInputs(rewards, 4), args())
    torch.testing.assert_close(got[:, :2], grpo.unsqueeze(1).expand(8, 2))
    assert (got[:, 2] == 0).all()
    assert got[0, 0].item() == pytest.approx((1.0 - 0.4375) / (statistics.stdev([1.0, 0.0, 0.5, 0.25]) + 1e-4))


def test_equal_turn_rewards_give_the_outcome_advantage_on_every_turn():
    """Turn rewards all equal within each group (an environment without `turn_rewards`): Â^T = 0 exactly, and a
    rollout answering at once gets Â^O as the ones that called a tool."""
    token_turns = torch.tensor([[0, 0, -1, 1], [0, -1, 1, 1], [0, 0, 0, -1], [0, -1, 1, -1]])
    states = torch.tensor([[0, 1], [0, 2], [0, -1], [0, 1]])
    rewards = torch.tensor([[0.25, 0.0], [0.25, 0.0], [0.25, float("nan")], [0.25, 0.0]])
    outcome = torch.tensor([1.0, 0.0, 0.0, 1.0])
    inputs = AdvantageInputs(outcome, 4, mask=(token_turns >= 0).float(),
                             turns=Turns(token_turns=token_turns, states=states, rewards=rewards))
    got = MT_GRPO(inputs, args(coef=2.0))
    expected = (outcome - 0.5) / (statistics.stdev([1.0, 0.0, 0.0, 1.0]) + 1e-4)
    for i in range(4):
        tokens = got[i][token_turns[i] >= 0].tolist()
        assert tokens == pytest.approx([expected[i].item()] * len(tokens))


def test_an_unscorable_reward_leaves_the_others_means():
    inputs, model_mask, _, _, called = random_rollouts(0)
    rewards = inputs.rewards.clone()
    rewards[1] = float("nan")
    got = MT_GRPO(AdvantageInputs(rewards, 4, mask=inputs.mask, turns=inputs.turns), args())
    model = model_mask.bool()
    assert got[1][model[1]].isnan().all()
    assert torch.isfinite(got[[0, 2, 3]]).all()
    untouched = MT_GRPO(inputs, args())
    torch.testing.assert_close(got[4:], untouched[4:])  # other groups as before


# ---------------------------------------------------------------------------------------------------- refused rollouts
def test_a_rollout_of_three_turns_is_refused_in_one_line():
    token_turns = torch.tensor([[0, -1, 1, -1, 2], [0, 0, 0, 0, -1]])
    states = torch.tensor([[0, 1, 2], [0, -1, -1]])
    rewards = torch.tensor([[0.5, 0.0, 0.0], [0.0, float("nan"), float("nan")]])
    inputs = AdvantageInputs(torch.tensor([1.0, 0.0]), 2, mask=(token_turns >= 0).float(),
                             turns=Turns(token_turns=token_turns, states=states, rewards=rewards))
    with pytest.raises(ValueError, match=r"^mt_grpo: rollout 0 has 3 turns; .* set max_tool_calling_iterations=1 "
                                         r"or use advantage_estimator='gigpo'\.$"):
        MT_GRPO(inputs, args())


def test_a_reward_of_the_answers_turn_is_refused():
    token_turns = torch.tensor([[0, -1, 1], [0, 0, -1]])
    states = torch.tensor([[0, 1], [0, -1]])
    rewards = torch.tensor([[0.5, 0.25], [0.0, float("nan")]])
    inputs = AdvantageInputs(torch.tensor([1.0, 0.0]), 2, mask=(token_turns >= 0).float(),
                             turns=Turns(token_turns=token_turns, states=states, rewards=rewards))
    with pytest.raises(ValueError, match=r"^turn_rewards: rollout 0's environment gives its answer's turn \(turn 1\) "
                                         r"the reward 0\.25; mt_grpo scores the answer"):
        MT_GRPO(inputs, args())


class HugeLook(LookOrPeek):
    def look(self) -> str:
        """Look at the sum.

        Returns:
            A hint.
        """
        self.turn_rewards.append(1e30)
        return "4"


def test_an_absurd_turn_reward_stops_the_step_naming_the_rollout(monkeypatch):
    """Before, 1e30 overflowed the group std and zeroed the first-turn advantage of every rollout in its group,
    silently."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    with pytest.raises(ValueError, match=r"^turn_rewards: rollout 0's environment \(HugeLook\) gives turn 0 the "
                                         r"reward 1e\+30; rewards beyond ±1e\+15 overflow the group std in float32"):
        trained_two_turn_batch(HugeLook, advantage_estimator="mt_grpo")


# ---------------------------------------------------------------------------------------------------- end to end
def closed_form(coef):
    """Each row's (advantage of turn 0, advantage of turn 1 or None) for one group of test_gigpo's environment: rows 0
    and 1 look (turn reward 0.5), row 2 peeks (−0.5), row 3 answers at once (no turn reward); rows 0, 2 and 3 answer
    42 (R = 1), row 1 answers 7 (R = 0)."""
    outcome, turn = [1.0, 0.0, 1.0, 1.0], [0.5, 0.5, -0.5, 0.0]
    combined = [o + t for o, t in zip(outcome, turn)]

    def normalised(values):
        mean, std = statistics.fmean(values), statistics.stdev(values)
        return [(value - mean) / (std + 1e-4) for value in values]

    a_outcome, a_turn, a_combined = normalised(outcome), normalised(turn), normalised(combined)
    return [(a_outcome[i] + coef * a_turn[i], a_outcome[i]) for i in range(3)] + [(a_combined[3], None)]


def test_one_training_step_of_a_two_turn_environment_has_the_closed_form_per_token(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    coef = 0.5
    batch = trained_two_turn_batch(advantage_estimator="mt_grpo", mt_grpo_turn_advantage_coef=coef)
    advantages, tool_mask, mask = batch["advantages"], batch["tool_mask"], batch["completion_mask"]
    assert advantages.shape == mask.shape
    for row in range(8):
        first, second = closed_form(coef)[row % 4]
        model_tokens = (mask * tool_mask)[row].bool()
        reply = (mask * (1 - tool_mask))[row].bool()
        assert (advantages[row][~model_tokens] == 0).all()
        if second is None:
            assert not reply.any() and FIRST_TURNS[row % 4] == "42"
            assert advantages[row][model_tokens].tolist() == pytest.approx([first] * int(model_tokens.sum()))
            continue
        start = int(reply.nonzero()[0])
        end = int(reply.nonzero()[-1]) + 1
        turn0, turn1 = model_tokens[:start], model_tokens[end:]
        assert int(turn0.sum()) == len(FIRST_TURNS[row % 4]) + 1
        assert int(turn1.sum()) == len(SECOND_TURNS[row % 4]) + 1
        assert advantages[row][:start][turn0].tolist() == pytest.approx([first] * int(turn0.sum()))
        assert advantages[row][end:][turn1].tolist() == pytest.approx([second] * int(turn1.sum()))
    # the closed form's own numbers: Â^O = 0.25/0.5, Â^T = 0.375/0.4787, Â^C = 0.125/0.4787 (std + 1e-4 each)
    assert closed_form(coef)[0] == pytest.approx((0.4999 + 0.5 * 0.7832, 0.4999), abs=1e-4)
    assert closed_form(coef)[3][0] == pytest.approx(0.2611, abs=1e-4)


# ---------------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "setting, message",
    [
        (dict(multi_objective_aggregation="normalize_then_sum"), r"^multi_objective_aggregation: 'normalize_then"),
        (dict(dynamic_sampling="resample"), r"^dynamic_sampling: 'resample' keeps or regroups rows"),
        (dict(mt_grpo_turn_advantage_coef=-1.0), r"mt_grpo_turn_advantage_coef"),
    ],
)
def test_refused_settings(setting, message):
    with pytest.raises(ValueError, match=message):
        trl_zoo.GRPOConfig(**tiny.config_kwargs(), advantage_estimator="mt_grpo", **setting)
