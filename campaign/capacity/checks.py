"""The capacity search's arguments, checked before its first cell (``python -m campaign.capacity``): the
same one line a campaign gives for a bad value, from the same checks, and the search's own bounds."""

from __future__ import annotations

from pathlib import Path

from campaign.capacity import search
from campaign.overrides import value_of

# what the search counts with (and platform.nodes, checked on its own)
WHOLE = ("batch_size", "threads", "dataset.num_images", "accelerator.what_if_samples")


def sweep_dir(args) -> str | None:
    """``hydra.sweep.dir=<folder>`` names the search's folder, as it names a campaign's: it becomes
    ``args.out`` and leaves the overrides (each round's campaign gets its own sweep folder below it). One
    line when it and ``--out`` name two folders, or when it holds an interpolation that only Hydra would
    fill in."""
    given = [o for o in args.overrides if o.lstrip("+").startswith("hydra.sweep.dir=")]
    if not given:
        return None
    args.overrides = [o for o in args.overrides if o not in given]
    folder = given[-1].split("=", 1)[1]
    if "${" in folder or not folder:
        return f"{given[-1]}: give the search's folder as a plain path (or with --out <folder>)"
    if args.out is not None and args.out != Path(folder):
        return f"--out {args.out} and {given[-1]} name two folders: give one of them"
    args.out = Path(folder)
    return None


def _whole_numbers(overrides: list[str]) -> str | None:
    for key in WHOLE:
        raw = value_of(overrides, key)
        if raw is None:
            continue
        if key == "threads" and raw.strip().lower() == "autotune":
            return (
                "threads=autotune: the search predicts from a fixed number of map threads per accelerator; "
                "give threads=<a whole number> (1 unless set)"
            )
        try:
            if int(raw) >= 1:
                continue
        except ValueError:
            return f"{key}={raw} is not a whole number"
        return f"{key}={raw} must be at least 1"
    return None


def _cell(tier: str, profile: dict, overrides: list[str]) -> list[str]:
    """The overrides of the search's emulated cell of one accelerator on ``tier``, as its rounds make them."""
    return [*search.prove_cell(tier, profile, overrides), "platform.tasks_per_node=1"]


def arguments(most: int, overrides: list[str]) -> str | None:
    """One line naming the first argument the search cannot run with (None: it can): ``--most``, a value
    the campaign's own checks refuse before Hydra, or one the search computes with that is not a whole
    number."""
    if most < 1:
        return f"--most {most} must be at least 1 (the most accelerators a cell emulates)"
    from campaign import choices

    return (
        choices.unknown_choice(overrides)
        or choices.missing_field(overrides)
        or choices.null_parent(overrides)
        or choices.bad_value(overrides)
        or _whole_numbers(overrides)
    )


def cells(overrides: list[str], profile: dict) -> str | None:
    """One line for the first tier whose cell of one accelerator the campaign's checks refuse (None: none
    is)."""
    from campaign import choices, validate
    from campaign.errors import ConfigError
    from jobs import interrupts
    from jobs.cell import Cell

    memo: dict = {}
    for tier in (value_of(overrides, "storage") or "local").split(","):
        try:
            validate.check(Cell.from_composed(choices.compose(_cell(tier, profile, overrides))), memo)
        except ConfigError as e:
            return f"{e} [storage={tier}]"
        except Exception as e:  # noqa: BLE001 - Hydra's composition errors: their first line names the override
            interrupts.surface(e)
            return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return None


def most_tasks(overrides: list[str], profile: dict, most: int) -> tuple[int, str]:
    """(``most``, lowered to the largest count of accelerators a node's cell may run on every tier; the
    campaign's refusal of the count above it, or ""). A count the campaign refuses fails its whole round:
    unet3d's npz volumes, which tasks do not shard yet, cannot run two accelerators in a cell."""
    from campaign import choices, validate
    from campaign.errors import ConfigError
    from jobs.cell import Cell

    memo: dict = {}
    tiers = (value_of(overrides, "storage") or "local").split(",")
    for n in range(most, 1, -1):
        try:
            for tier in tiers:
                cell = [*search.prove_cell(tier, profile, overrides), f"platform.tasks_per_node={n}"]
                validate.check(Cell.from_composed(choices.compose(cell)), memo)
        except ConfigError as e:
            refused = f"{n - 1} a node, as a cell of {n} is refused: {e}"
            continue
        return n, "" if n == most else refused
    return min(most, 1), refused if most > 1 else ""
