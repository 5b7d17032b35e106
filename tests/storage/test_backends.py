"""A tier's kind of storage names a back-end (jobs/storage/backends.py) that says what the tier can do:
every preset's kind has one, and planning asks it (multi-node reach, settings of another kind)."""

from pathlib import Path

import pytest
import yaml

from jobs.errors import ConfigError
from jobs.schema import StorageKind
from jobs.storage import backends
from support.paths import ROOT


def test_every_kind_and_every_preset_has_a_back_end():
    assert set(backends.BACKENDS) == {k.value for k in StorageKind}
    presets = sorted((ROOT / "conf" / "storage").glob("*.yaml"))
    assert len(presets) >= 10
    for preset in presets:
        kind = (yaml.safe_load(preset.read_text()) or {}).get("kind", "block")
        assert backends.get(kind).kind == kind, preset.name
    with pytest.raises(ConfigError, match=r"^storage.kind=tape is not a kind of storage; choose one of blo"):
        backends.get("tape")


def test_only_a_request_store_serves_itself_and_only_without_an_endpoint():
    class Tier:
        endpoint = None

    st = Tier()
    assert backends.get("object").embedded(st)
    st.endpoint = "http://127.0.0.1:9000"
    assert not backends.get("object").embedded(st)
    assert not any(backends.get(k).embedded(Tier()) for k in ("block", "network", "memory"))


def test_planning_asks_the_back_end_where_a_setting_and_a_node_count_belong(refusal, tmp_path: Path):
    line = refusal("storage=tmpfs", "storage.prefix=runs/")
    assert line == (
        "storage.prefix=runs/: storage=tmpfs is of kind memory; prefix belongs to a tier of kind object "
        "(storage=s3)"
    )
    line = refusal("platform=slurm", "platform.nodes=2", "storage=local", f"storage.root={tmp_path}")
    assert line is not None and "is one machine's; a multi-node cell needs a shared file system" in line, line
    assert "storage=shared" in line
    shared = refusal("platform=slurm", "platform.nodes=2", "storage=shared", f"storage.root={tmp_path}")
    assert shared is None or "one machine's" not in shared, shared
