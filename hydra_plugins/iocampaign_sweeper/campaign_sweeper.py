"""Hydra launcher plugin of iocampaign (Hydra finds plugins only under ``hydra_plugins``).

The work happens in ``campaign.launch``; this shim only registers it as ``hydra/launcher=campaign``.
"""

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


@dataclass
class CampaignLauncherConf:
    _target_: str = "hydra_plugins.iocampaign_launcher.campaign_launcher.CampaignLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="campaign", node=CampaignLauncherConf, provider="iocampaign")


class CampaignLauncher(Launcher):
    def __init__(self) -> None:
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.task_function: Optional[TaskFunction] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from campaign.launch import launch

        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        return launch(self.hydra_context, self.task_function, self.config, job_overrides, initial_job_idx)


__all__: Sequence[Any] = ["CampaignLauncher", "CampaignLauncherConf"]
