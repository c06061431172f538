"""Rewards: the shared rule registry, PPO's matchers, process shaping and custom providers (see docs/rewards.md).

Importing this package is cheap: math-verify (sympy) loads only when the gsm8k fallback needs it, torch only when
``process_rewards`` runs, and user code only in ``RewardConfig.validate_imports`` / ``needs`` / ``build``.
"""

from lightning_rl.rewards.config import RewardConfig, check_reward_needs
from lightning_rl.rewards.function import RewardFunction, score
from lightning_rl.rewards.process import process_rewards
from lightning_rl.rewards.provider import (
    KNOWN_NEEDS,
    GroupRewardProvider,
    ProviderFunction,
    RewardProvider,
    reward_provider,
)
from lightning_rl.rewards.registry import (
    BUILTINS,
    PPO_MATCHERS,
    SHARED_RULES,
    builtin_names,
    check_provider,
    load_callable,
    load_catalog,
)

__all__ = [
    "BUILTINS",
    "KNOWN_NEEDS",
    "PPO_MATCHERS",
    "SHARED_RULES",
    "GroupRewardProvider",
    "ProviderFunction",
    "RewardConfig",
    "RewardFunction",
    "RewardProvider",
    "builtin_names",
    "check_provider",
    "check_reward_needs",
    "load_callable",
    "load_catalog",
    "process_rewards",
    "reward_provider",
    "score",
]
