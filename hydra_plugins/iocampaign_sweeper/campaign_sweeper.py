"""Hydra sweeper plugin of iocampaign (Hydra finds plugins only under ``hydra_plugins``).

The work happens in ``campaign.sweep``: it expands the grid as Hydra's basic sweeper does, plans
every cell once (``campaign.planning``), validates all of them before anything runs, and hands the
planned cells to the one launch path (``campaign.launch``), local or Slurm. This shim only registers
it as ``hydra/sweeper=campaign``.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


@dataclass
class CampaignSweeperConf:
    _target_: str = "hydra_plugins.iocampaign_sweeper.campaign_sweeper.CampaignSweeper"
    params: Optional[Dict[str, str]] = None  # the grid of an experiment preset (hydra.sweeper.params)


ConfigStore.instance().store(
    group="hydra/sweeper", name="campaign", node=CampaignSweeperConf, provider="iocampaign"
)


class CampaignSweeper(BasicSweeper):
    def __init__(self, params: Optional[Dict[str, str]] = None) -> None:
        super().__init__(max_batch_size=None, params=params)  # a campaign is planned as one batch

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.task_function = task_function

    def sweep(self, arguments: List[str]) -> Any:
        from campaign.sweep import sweep

        assert self.config is not None and self.hydra_context is not None
        return sweep(self.hydra_context, self.config, [*self._parse_config(), *arguments])


__all__: Sequence[Any] = ["CampaignSweeper", "CampaignSweeperConf"]
