"""``python -m campaign``: one cell on the defaults, or a grid with ``-m key=a,b``."""

import sys

import hydra
from omegaconf import DictConfig

from campaign import choices, schema, sweep

schema.register()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from campaign.cell import execute

    execute(cfg)


if __name__ == "__main__":
    problem = choices.unknown_choice(sys.argv[1:])
    if problem:
        print(f"campaign: {problem}", file=sys.stderr)
        sys.exit(2)
    main()
    sys.exit(sweep.exit_status)
