"""Role LightningModules: the trainable policy and critic, and the frozen reference."""

from lightning_rl.roles.common import OptimizerConfig
from lightning_rl.roles.critic import CriticModule
from lightning_rl.roles.policy import PolicyModule
from lightning_rl.roles.reference import ReferenceModule

__all__ = ["CriticModule", "OptimizerConfig", "PolicyModule", "ReferenceModule"]
