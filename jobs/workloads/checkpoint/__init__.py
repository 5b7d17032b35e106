"""Section III-C (Figs. 9-10): AlexNet with a checkpoint every ``checkpoint.every`` steps, straight to
a tier or through a burst buffer, each run beside the same training without checkpoints.

The model, its training and how one checkpoint is written and read back are the cell's framework's
(its ``engines["checkpoint"]`` module: ``jobs.frameworks.tensorflow.checkpoints``, a ``tf.train.Checkpoint``;
``jobs.frameworks.pytorch.torch_saving``, a ``torch.save`` of the ``state_dict()``s); the targets,
flushes, drain, retention, recovery and restore are this package's (``saving``, ``store``, ``recovery``,
``restore``), the same for every framework.

With ``storage@checkpoint.slow=s3`` (or ``=azure``) the burst buffer drains to a bucket (``bucket``): the
cell's store is served for the run (the embedded server, or the user's endpoint), and the restore fetches
the last checkpoint's objects back cold."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
import uuid
from pathlib import Path

from jobs.errors import ConfigError
from jobs.metrics import MB, of
from jobs.storage import backends
from jobs.workloads import Figure, RunContext, Workload, register
from jobs.workloads.alexnet import AlexNetConf, check_alexnet, training_parallelism
from jobs.workloads.checkpoint import restore

log = logging.getLogger(__name__)


def _verdict(equal: bool | None) -> str:
    return "equal" if equal else "NOT equal" if equal is False else "not compared"


def _snapshot(cfg, steps: int):
    """What the restore compares with: the weights at the run's last checkpoint step (``steps``: those the
    run trains, as its baseline trained them: ``workload.steps``, or fewer when the data runs out first)."""
    return restore.Snapshot(steps // cfg.checkpoint.every * cfg.checkpoint.every)


def _restores(cfg, ds, settings, snapshot, fresh, store=None) -> list[dict]:
    """The cold restore of each tier's last checkpoint, fast first, into the model ``fresh`` builds (the
    engine's); the slow tier's from its bucket when it is one (``store``: the store serving it)."""
    from jobs.workloads.checkpoint import saving as checkpoint

    ck = cfg.checkpoint
    roots = (
        ("fast", settings.fast_root, ck.fast),
        ("slow", None if settings.bucket else settings.slow_root, ck.slow),
    )
    folders = [
        (tier, checkpoint.ckpt_dir(root) / settings.tag, backends.of(st))
        for tier, root, st in roots
        if root is not None
    ]
    shape = {
        "num_classes": max(1, ds.num_classes),
        "side": cfg.workload.image_side,
        "width": cfg.workload.width,
        "seed": cfg.seed,
    }
    out = restore.after_run(folders, settings.tag, shape, snapshot, fresh)
    if settings.bucket is not None:
        fast = checkpoint.ckpt_dir(settings.fast_root)
        into = fast / settings.tag if (fast / settings.tag).is_dir() else fast
        slow = backends.of(cfg.checkpoint.slow)
        from_bucket = restore.from_bucket(settings.bucket, store, into, shape, snapshot, fresh, slow)
        out += [from_bucket] if from_bucket is not None else []
    return out


@contextlib.contextmanager
def _slow_store(cfg):
    """The store holding the checkpoints' bucket (``checkpoint.slow`` of kind object) served for the run,
    or None for a file-system slow tier."""
    if not backends.of(cfg.checkpoint.slow).requests:
        yield None
        return
    from jobs.storage.objectstore import tier

    with tier.serving(cfg.checkpoint.slow, cfg.checkpoint.slow.root) as store:
        yield store


def _bucket(store, tag: str, root: str):
    """The run's checkpoints in ``store`` (None: a file-system slow tier), its record of the keys it puts
    in the tool's folder on ``root`` (``checkpoint.slow.root``)."""
    if store is None:
        return None
    from jobs.storage.objectstore import journal
    from jobs.workloads.checkpoint.bucket import Bucket

    srv = store.server
    return Bucket(
        store.endpoint,
        tag,
        credentials=srv.credentials if srv is not None else None,
        server_data=str(srv.data_dir) if srv is not None else None,
        records=str(journal.folder(root, "checkpoint.slow.root")),
    )


def _untraced(settings) -> str:
    """What a run's trace counted when the slow tier has no device of this machine's."""
    if settings.bucket is not None and settings.bucket.server_data is None:
        title = settings.bucket.service.title
        return f"all local disks (the slow tier is a bucket on the user's {title} endpoint)"
    return "all disks"


def _checkpoints_taken(cfg) -> None:
    """Refuse a cell whose training ends before its first checkpoint (one epoch of ``dataset.num_images``,
    or ``workload.steps`` if fewer): it would measure no checkpoint and restore none."""
    images = cfg.dataset.num_images if cfg.dataset is not None else None
    if not isinstance(images, int) or images <= 0:
        return  # a folder's count is known once it is listed; the run warns when the data runs out
    steps = images // cfg.batch_size
    if cfg.workload.steps:
        steps = min(steps, cfg.workload.steps)
    if steps < cfg.checkpoint.every:
        raise ConfigError(
            f"checkpoint.every={cfg.checkpoint.every}: the run trains {steps} steps ({images} images at "
            f"batch_size={cfg.batch_size}, workload.steps={cfg.workload.steps}), so it would write no "
            "checkpoint; give checkpoint.every of at most the steps, or more dataset.num_images"
        )


@register
class Checkpoint(Workload):
    name = "checkpoint"
    schema = AlexNetConf  # the mini-app's settings; the checkpoint's own are in the checkpoint group
    run_model = "checkpoint"  # its training twice and its checkpoints' writes, on this machine's CPU
    not_modelled = "training with checkpoints on a GPU or a cluster's node, whose speed is not known here"
    metrics = of(
        "steps",
        "runtime_s",
        "steady_runtime_s",
        "first_step_s",
        "baseline_runtime_s",
        "baseline_steady_runtime_s",
        "checkpoint_stall_s",
        "median_stall_s",
        "drain_after_end_s",
        "checkpoint_bytes_left",
        "restore_s",
        "restore_mb_s",
        "restore_device_read_ratio",
        "restore_fast_s",
    )
    record_keys = (
        "drain_finished_at",
        "train_ended_at",
        "checkpoints",
        "durable",
        "target",
        "effective_target",
        "fallback",
        "mode",
        "flush",
        "device",
        "parameters",
        "final_loss",
        "checkpoint_dir",
        "trace_file",
        "trace_device",
        "recovered",
        "restores",
        "checkpoint_store",
    )
    bucket_checkpoints = True
    figures = (
        Figure("fig9", "analysis.figures.checkpoints:fig9", "Fig. 9: runtime per checkpoint target", order=9),
        Figure(
            "fig10",
            "analysis.figures.checkpoints:fig10",
            "Fig. 10: writes to the slow tier during and after training",
            order=10,
        ),
    )

    def decodes(self, cfg) -> bool:
        return True  # the model trains on decoded images

    def check(self, cfg) -> None:
        from jobs.storage.roots import storage_root

        ck = cfg.checkpoint
        if ck.every < 1 or ck.max_to_keep < 1:
            raise ConfigError(
                f"checkpoint.every={ck.every} and checkpoint.max_to_keep={ck.max_to_keep} must be at least 1"
            )
        check_alexnet(cfg)
        _checkpoints_taken(cfg)
        from jobs import frameworks

        fw = frameworks.of(cfg)
        if ck.mode == "async" and not fw.async_checkpoint:
            raise ConfigError(
                f"checkpoint.mode=async is TensorFlow's asynchronous checkpoint: framework={fw.name} saves "
                "synchronously (checkpoint.mode=sync)"
            )
        # the slow tier must be usable before training starts; a missing fast tier only falls back
        storage_root(cfg, ck.slow, "checkpoint.slow")

    def tiers(self, cfg) -> list:
        return [cfg.storage, cfg.checkpoint.slow, cfg.checkpoint.fast]

    def parallelism(self, cfg, result: dict | None = None) -> int | None:
        return training_parallelism(cfg, result)

    def run_once(self, ctx: RunContext) -> dict:
        """The same training twice: without checkpoints (the run's baseline), then with them, traced."""
        with _slow_store(ctx.cfg) as store:
            try:
                return self._run_once(ctx, store)
            except RuntimeError as e:  # a request or the drain failed: say so when the store's server died
                died = store.server.dead() if store is not None and store.server is not None else None
                if died is None:
                    raise
                from jobs.storage.objectstore.client import StoreError

                raise StoreError(
                    f"checkpoint.slow={ctx.cfg.checkpoint.slow.name}: {died} during the run ({e})"
                ) from None

    def _run_once(self, ctx: RunContext, store) -> dict:
        from jobs.observe import trace
        from jobs.storage import cache
        from jobs.workloads.alexnet.settings import TrainSettings
        from jobs.workloads.checkpoint import recovery as ckpt_recovery
        from jobs.workloads.checkpoint import saving as checkpoint

        cfg, ck = ctx.cfg, ctx.cfg.checkpoint
        # unique per run, not only per pid: under a PID namespace the same cell gets the same pid
        run = f"{'r' if ctx.run > 0 else 'w'}{abs(ctx.run)}"
        tag = f"{ckpt_recovery.TAG_PREFIX}{ctx.cell.cell_id}_{run}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        settings = checkpoint.CheckpointSettings(
            train=TrainSettings.from_config(
                cfg,
                ctx.seed,
                width=cfg.workload.width,
                steps=cfg.workload.steps,
                device=cfg.workload.device,
            ),
            every=ck.every,
            target=ck.target,
            fast_root=Path(ck.fast.root),
            slow_root=Path(ck.slow.root),
            flush=ck.flush,
            mode=ck.mode,
            max_to_keep=ck.max_to_keep,
            keep=ck.keep,
            tag=tag,
            bucket=_bucket(store, tag, ck.slow.root),
        )
        bucket = settings.bucket
        recovered = ckpt_recovery.recover_all(
            checkpoint.ckpt_dir(settings.fast_root),
            None if bucket else checkpoint.ckpt_dir(settings.slow_root),
            settings.flush,
            bucket_of=(lambda t: dataclasses.replace(bucket, tag=t)) if bucket else None,
        )
        if recovered:
            log.warning("recovered checkpoints left by an earlier, interrupted run: %s", recovered)
        engine = self.engine(cfg).engine(cfg)
        base = checkpoint.run_once(ctx.ds, settings, with_checkpoints=False, engine=engine)
        cache.evict(ctx.ds.storage_files)
        # the device the slow tier's writes land on: the embedded server's, none on a user's endpoint
        slow_at = settings.bucket.server_data if bucket else str(settings.slow_root)
        slow_disk = trace.device_of(slow_at) if slow_at and os.path.exists(slow_at) else None
        tracer = trace.Tracer(slow_disk, cfg.workload.trace_interval_s).start()
        snapshot = _snapshot(cfg, base["steps"]) if ck.restore else None
        t0 = time.perf_counter()
        try:
            # its folders are marked finished only once the restore is done with them: a run killed or failed
            # in between must not leave checkpoints that recovery takes for a finished run's
            result = checkpoint.run_once(
                ctx.ds, settings, mark=ctx.mark, snapshots=snapshot, finish=False, engine=engine
            )
        finally:
            tracer.stop()
        try:
            if store is not None:
                result["checkpoint_store"] = {**store.describe(), "prefix": bucket.key_prefix}
            self._after(ctx, settings, result, base, tracer, t0, slow_disk, recovered, snapshot, store)
        # a failed run (a corrupt checkpoint, an interrupt) leaves none of its checkpoints
        except BaseException:
            log.warning(
                "the run failed after training: its checkpoints (%d bytes, %s) are removed",
                checkpoint.remove_run(settings),
                settings.tag,
            )
            raise
        # what was durable is in the result; unless asked to keep them, the checkpoints go (a full-scale
        # run leaves ~3.5 GB otherwise, and later cells would fall back for want of space)
        if ck.keep:
            checkpoint.mark_finished(settings)
        else:
            checkpoint.remove_run(settings)
        result["checkpoint_bytes_left"] = checkpoint.bytes_of_run(settings)
        if cfg.workload.steps and result["steps"] < cfg.workload.steps:
            log.warning(
                "the data ran out after %d of workload.steps=%d steps (one epoch of %d images at batch %d)",
                result["steps"],
                cfg.workload.steps,
                result["images"],
                cfg.batch_size,
            )
        return result

    def _after(
        self,
        ctx: RunContext,
        settings,
        result: dict,
        base: dict,
        tracer,
        t0: float,
        slow_disk,
        recovered,
        snapshot,
        store=None,
    ) -> None:
        """The run's trace written, its baseline's figures added, and its last checkpoint restored cold
        (``checkpoint.restore=true``): what ``run_once`` does once training has ended."""
        from jobs.observe import trace

        tracer.mark(trace.FIRST, t0)
        tracer.mark("end_of_training", t0 + result["runtime_s"])
        tracer.mark("drain_finished", t0 + result["runtime_s"] + result["drain_after_end_s"])
        tracer.write(ctx.job_dir / f"trace_{ctx.tag}.csv")
        result.update(
            baseline_runtime_s=base["runtime_s"],
            baseline_steady_runtime_s=base["steady_runtime_s"],
            trace_file=f"trace_{ctx.tag}.csv",
            trace_device=slow_disk or _untraced(settings),
            recovered=recovered,
        )
        # the run read its images twice, each time cold: its bytes are both passes' (the cache state compares
        # them with the device's reads over the whole run; one pass's made a cold run read 229% of consumed)
        result["bytes_consumed"] += base["bytes_consumed"]
        if result["bytes_read_device"] is not None and base["bytes_read_device"] is not None:
            result["bytes_read_device"] += base["bytes_read_device"]
        if snapshot is not None:
            result["restores"] = _restores(
                ctx.cfg, ctx.ds, settings, snapshot, self.engine(ctx.cfg).fresh, store
            )
            result.update(restore.metrics(result["restores"]))

    def describe(self, result: dict) -> str:
        back = "".join(
            f"; restored {r['bytes'] / MB:.0f} MB from {r['tier']} in {r['restore_s']:.2f} s "
            f"({r['cache_state']}, weights {_verdict(r['weights_equal'])}, checksums {r['checksums']})"
            for r in result.get("restores") or []
        )
        stall = f"{result['median_stall_s']:.3f}" if result["median_stall_s"] is not None else "-"
        return (
            f"{result['runtime_s']:.2f} s runtime "
            f"({result['baseline_runtime_s']:.2f} s without checkpoints), "
            f"{len(result['checkpoints'])} checkpoints to {result['effective_target']}, "
            f"median stall {stall} s, drain after training {result['drain_after_end_s']:.2f} s"
            + (f"; FALLBACK: {result['fallback']}" if result["fallback"] else "")
            + back
        )
