"""``python -m campaign``: one cell on the defaults, or a grid with ``-m key=a,b``."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TensorFlow's C++ INFO lines bury the campaign's own

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from campaign import choices, schema, sweep  # noqa: E402

schema.register()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from campaign.cell import execute

    execute(cfg)


def _terminate(signum, frame):  # scancel, kill, Ctrl-\: unwind so tiers and locks are released
    sys.exit(128 + signum)


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, _terminate)
    if "+experiment=paper" in sys.argv[1:]:
        from campaign import paper

        sys.exit(paper.main([a for a in sys.argv[1:] if a != "+experiment=paper"]))
    problem = choices.unknown_choice(sys.argv[1:])
    if problem:
        print(f"campaign: {problem}", file=sys.stderr)
        sys.exit(2)
    main()
    sys.exit(sweep.exit_status)
