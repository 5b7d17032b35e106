"""What each rank of a data-, tensor- and pipeline-parallel training job writes at a checkpoint.

A model of ``P`` parameters keeps, per parameter, ``model_bytes_per_param`` of weights (bf16: 2) and
``optimizer_bytes_per_param`` of optimizer state (Adam with fp32 master weights: 4 + 4 + 4 = 12). Its
``N = tp x pp x dp`` ranks split it as Megatron-DeepSpeed and DLIO's checkpointing do:

- tensor and pipeline parallelism give each (tp, pp) slice ``P / (tp x pp)`` parameters;
- the slice's weights are written by its first data-parallel replica (``dp`` rank 0), or shared out
  over the replicas at ZeRO stage 3 (each writes ``1/dp`` of them);
- its optimizer state is written by the first replica at ZeRO stage 0, shared out over the replicas
  from stage 1 up.

Ranks are numbered with tensor parallelism fastest, then data, then pipeline (Megatron's order). The
whole checkpoint is the sum over ranks: for Llama 3 8B, 8.03 B parameters x 14 B = 112 GB (MLPerf
Storage: "105 GB", in GiB); every rank writes its shard's bytes in two files, as DeepSpeed does
(``model_states``, ``optim_states``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """A model's size and how it is split; ``parameters`` from the transformer's shape when 0."""

    name: str
    parameters: int = 0
    layers: int = 0
    hidden: int = 0
    ffn_hidden: int = 0
    heads: int = 0
    kv_heads: int = 0
    vocab: int = 0
    tied_embeddings: bool = False
    model_bytes_per_param: int = 2
    optimizer_bytes_per_param: int = 12
    tp: int = 1
    pp: int = 1
    dp: int = 1
    zero_stage: int = 0

    @classmethod
    def of(cls, conf) -> Shape:
        """From a ``checkpoint_model`` preset (the typed ``CheckpointModelConf``) or a record's dict of it."""
        get = conf.get if isinstance(conf, dict) else lambda k: getattr(conf, k, None)
        names = [f for f in cls.__dataclass_fields__]
        return cls(
            **{
                f: (
                    str(get(f))
                    if f == "name"
                    else (bool(get(f)) if f == "tied_embeddings" else int(get(f) or 0))
                )
                for f in names
                if get(f) is not None
            }
        )

    @property
    def ranks(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def params(self) -> int:
        """Parameters: given, or those of a Llama-style decoder (grouped-query attention, SwiGLU MLP,
        RMSNorm, untied embeddings unless tied)."""
        if self.parameters:
            return self.parameters
        h, heads = self.hidden, self.heads or 1
        kv = h // heads * (self.kv_heads or heads)
        layer = 2 * h * h + 2 * h * kv + 3 * h * self.ffn_hidden + 2 * h
        return self.layers * layer + self.vocab * h * (1 if self.tied_embeddings else 2) + h

    def coordinates(self, rank: int) -> tuple[int, int, int]:
        """(tp, dp, pp) rank of model rank ``rank``."""
        return rank % self.tp, rank // self.tp % self.dp, rank // (self.tp * self.dp)

    def files(self, rank: int) -> list[tuple[str, int]]:
        """(file name, bytes) that model rank ``rank`` writes; files of no bytes are left out."""
        tp, dp, pp = self.coordinates(rank)
        slice_params = self.params / (self.tp * self.pp)
        if self.zero_stage >= 3:
            model = slice_params / self.dp
        else:
            model = slice_params if dp == 0 else 0
        if self.zero_stage >= 1:
            optim = slice_params / self.dp
        else:
            optim = slice_params if dp == 0 else 0
        stem = f"tp{tp:02d}_pp{pp:03d}_dp{dp:03d}"
        out = [
            (f"{stem}_model_states.bin", round(model * self.model_bytes_per_param)),
            (f"{stem}_optim_states.bin", round(optim * self.optimizer_bytes_per_param)),
        ]
        return [(n, b) for n, b in out if b > 0]

    def rank_bytes(self, rank: int) -> int:
        return sum(b for _, b in self.files(rank))

    @property
    def total_bytes(self) -> int:
        """The whole checkpoint: every rank's files."""
        return sum(self.rank_bytes(r) for r in range(self.ranks))

    def written(self, ranks_written: int | None) -> list[int]:
        """The model ranks a run writes: all, or the first ``ranks_written`` (MLPerf Storage's subset
        mode)."""
        return list(range(self.ranks if ranks_written is None else int(ranks_written)))
