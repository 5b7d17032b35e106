"""The first process of the embedded server's mount namespace: gives the server a root that holds only
what it needs, then becomes the server (or, with ``--relay``, the relay in front of it). Run as a
program, with the standard library alone (it runs from ``unshare --mount``, before the server, and
imports nothing of the project):

    python -I -S confine.py [--relay=FD:PORT,...] FOLDER PROGRAM_FD ARG...  (the program's arguments)

The new namespace starts as a copy of every mount on the machine, and a copy kept there holds its file
system alive for as long as the server runs, whoever unmounts it outside: an emulated tier's loop
device stays busy, another user's disk cannot be freed. So the server's root is a new tmpfs (in
``FOLDER/root``) holding the folder at its own path (SeaweedFS makes its paths absolute), the folder's
``tmp`` as /tmp (SeaweedFS puts its gRPC sockets in /tmp by fixed names, where another user could
plant a link or take the name first), and /dev, /proc, /sys and /etc; the old root is detached whole
after ``pivot_root``. The only file system the server then holds is the one its folder is on. The
program runs from ``PROGRAM_FD``, opened before (it may lie anywhere).

With ``--relay``, the namespace has a network of its own too (``unshare --net``): its loopback is
brought up, and this process stays as the relay (``relay.py``) from each listening socket ``FD`` the
tool bound on the host to ``PORT`` inside, the program its child."""

import ctypes
import importlib.util
import os
import platform
import sys

MS_BIND = 0x1000
MS_REC = 0x4000
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
SYSTEM = ("/dev", "/proc", "/sys")  # bound with what is mounted under them (no disk's file system)

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _bind(source: str, target: str, flags: int = 0) -> None:
    os.makedirs(target, exist_ok=True)
    _check(_libc.mount(source.encode(), target.encode(), None, MS_BIND | flags, None), f"bind {source}")


def confine(folder: str) -> None:
    """Make the calling process's root a new one holding only ``folder`` and the system trees."""
    root = os.path.join(folder, "root")
    opts = b"mode=0755,size=1m"
    _check(_libc.mount(b"iocampaign-s3", root.encode(), b"tmpfs", 0, opts), "mount its root")
    _bind(os.path.join(folder, "tmp"), root + "/tmp")
    _bind(folder, root + folder)  # after /tmp: the folder may lie under /tmp (its path is then made there)
    for d in SYSTEM:
        _bind(d, root + d, MS_REC)
    _bind("/etc", root + "/etc")
    os.chdir(root)
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(0, f"pivot_root: no system call number known for {platform.machine()}")
    _check(_libc.syscall(number, b".", b"."), "pivot_root")  # the old root now lies over the new one
    _check(_libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir(folder)


def _relay_module():
    """``relay.py`` beside this file, loaded by its path (``-I`` puts no folder of the project on the
    path) before the root is confined (the confined root holds no Python)."""
    spec = importlib.util.spec_from_file_location(
        "relay", os.path.join(os.path.dirname(__file__), "relay.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    routes = None
    if argv and argv[0].startswith("--relay="):
        import socket

        pairs = (r.split(":") for r in argv.pop(0).split("=", 1)[1].split(","))
        routes = [(socket.socket(fileno=int(fd)), int(port)) for fd, port in pairs]
        relay = _relay_module()
    folder, fd, *command = argv
    try:
        confine(folder)
        program = f"/proc/self/fd/{int(fd)}"
        if routes is None:
            os.execv(program, ["weed", *command])
        relay.loopback_up()
        relay.run(routes, program, ["weed", *command])  # ends as the server ended: never returns
    except OSError as e:
        print(f"confine: {e.strerror or e}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
