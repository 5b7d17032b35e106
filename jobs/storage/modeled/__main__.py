"""The layer's own process: ``python -m jobs.storage.modeled serve NAME BACKING MOUNT GEOMETRY_JSON``
(started by ``mount.setup``; it ends, unmounting, when the process that started it ends)."""

from __future__ import annotations

import json
import sys


def serve(name: str, backing: str, mount: str, geometry: str) -> None:
    import mfusepy

    from jobs import lifeline
    from jobs.storage.modeled.disk import Disk
    from jobs.storage.modeled.layer import Layer, OnDisk, Placement, backing_files
    from jobs.storage.modeled.lustre import Lustre
    from jobs.storage.modeled.mount import DEVICES, SOURCE, SUBTYPE

    # storage.model.device -> device
    build = {"hdd": lambda g: OnDisk(Disk(g), Placement()), "lustre": Lustre}
    lifeline.bind()
    figures = json.loads(geometry)
    kind = figures.pop("device", "hdd")
    device = build[kind](DEVICES[kind](**figures))
    device.adopt(backing_files(backing))
    mfusepy.FUSE(
        Layer(backing, device),
        mount,
        foreground=True,
        fsname=SOURCE + name,
        subtype=SUBTYPE,
        kernel_cache=True,
        allow_other=True,
        default_permissions=True,
        max_threads=64,
        max_idle_threads=64,
    )


if __name__ == "__main__":
    if len(sys.argv) != 6 or sys.argv[1] != "serve":
        print("usage: python -m jobs.storage.modeled serve NAME BACKING MOUNT GEOMETRY_JSON", file=sys.stderr)
        sys.exit(2)
    serve(*sys.argv[2:])
