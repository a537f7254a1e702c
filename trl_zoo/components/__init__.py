"""The trainer's components, one feature of the step a file (file = class in snake case = pipeline name), and the
helpers only one of them uses beside it. `COMPONENTS` is the order in which they are built, after TRL's constructor
(the features that need the model and TRL's state); which takes part in which hook point is the table of
hooks/hook_points.py. The plumbing they plug into (the component base, the pipeline, the door, the generation and loss
seams) is hooks/.
"""

from __future__ import annotations

from ..hooks.component import Component
from .advantages import Advantages
from .compiled_layers import CompiledLayers
from .critic import Critic
from .dynamic_sampling import DynamicSampling
from .expert_sft import ExpertSFT
from .fused_lora import FusedLora
from .generation_speed import GenerationSpeed
from .kl_control import KLControl
from .length_bucketing import LengthBucketing
from .luffy import Luffy
from .old_logps import OldLogps
from .prompt_length import PromptLength
from .prompt_once import PromptOnce
from .resume import Resume
from .rewards import Rewards
from .router import Router
from .skip_zero_advantage import SkipZeroAdvantage
from .teacher import Teacher

COMPONENTS: tuple[type[Component], ...] = (
    GenerationSpeed,  # merged, autocast, compiled decoding (generation_speed.py)
    FusedLora,  # LoRA layers in two matrix products (fused_lora.py)
    CompiledLayers,  # decoder layers under torch.compile for the training passes (compiled_layers.py)
    Rewards,  # reward shaping and NaN/±inf checks of the reward call (rewards.py)
    KLControl,  # KL in the reward, adaptive β, reference resets (kl_control.py)
    Advantages,  # the estimator table's Â (advantages.py)
    Teacher,  # a teacher's λ·(log π_T − log π_old) added to Â (teacher.py)
    Critic,  # the critic: values, value targets, value loss (value_model.py; the maths: ../value_function.py)
    ExpertSFT,  # CHORD: (1 − μ)·L_RL + μ·L_SFT on expert answers (the maths: ../sft_term.py)
    Luffy,  # LUFFY: expert traces as off-policy rollouts of each group (luffy.py)
    SkipZeroAdvantage,  # the loss forward over rows with Â ≠ 0 (skip_zero_advantage.py)
    DynamicSampling,  # generation rounds and regrouping (dynamic_sampling.py)
    Router,  # MoE router statistics (router.py)
    LengthBucketing,  # micro-batches re-cut by length (length_bucketing.py)
    PromptOnce,  # each distinct prompt of a log-prob pass forwarded once (prompt_once.py)
    OldLogps,  # old log-probs only where an optimizer step needs them (old_logps.py)
    Resume,  # checkpoints carry trl_zoo's state (resume.py)
    PromptLength,  # prompts within the model's positions (prompt_length.py)
)
