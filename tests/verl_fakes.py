"""Stand-ins for what a verl v1 run starts with Ray, so that its trainer steps run on a CPU in
one process (tests/training/verl_plugin): TransferQueue's key-value store (`FakeQueue`) and the
actor worker group (`FakeActor`), which computes log-probabilities and entropies as verl's
engine does (logits / temperature, verl's own `logprobs_from_logits` on the next token and
`entropy_from_logits`, one packed sequence at a time) with a real model, and splits its rows
across data-parallel ranks with verl's own chunking. Imports verl: only its tests use it."""
import torch
from transfer_queue import KVBatchMeta
from verl.protocol import BatchData
from verl.utils import tensordict_utils as tu
from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits


def jagged(values):
    return torch.nested.as_nested_tensor(list(values), layout=torch.jagged)


class FakeQueue:
    """`transfer_queue`'s kv_batch_get / kv_batch_put over a dict: per-sample 1-D tensors come
    back nested (jagged), 0-d ones stacked, strings as a list (a NonTensorStack)."""

    def __init__(self):
        self.samples: dict[str, dict] = {}

    def put_rows(self, keys: list[str], rows: list[dict], partition_id: str = "train") -> KVBatchMeta:
        for key, row in zip(keys, rows):
            self.samples.setdefault(key, {}).update(row)
        return KVBatchMeta(keys=list(keys), tags=[{} for _ in keys], partition_id=partition_id)

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        rows = [self.samples[k] for k in keys]
        names = [f for f in (select_fields or rows[0]) if all(f in r for r in rows)]
        out = {}
        for name in names:
            values = [r[name] for r in rows]
            if isinstance(values[0], str):
                out[name] = values
            elif values[0].dim() == 0:
                out[name] = torch.stack(values)
            else:
                out[name] = jagged(values)
        return tu.get_tensordict(out)

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        for name, value in fields.items():
            per_row = value.unbind() if value.is_nested else list(value)
            for key, row in zip(keys, per_row):
                self.samples[key][name] = row.clone()
        return KVBatchMeta(keys=list(keys), tags=[{} for _ in keys], partition_id=partition_id)


class FakeActor:
    """The actor worker group on one process with `ranks` data-parallel ranks (see the module
    docstring); `calls` records each call's row count. A `KVBatchMeta` argument is read from and
    written to `queue`, as verl's bridge to TransferQueue does."""

    def __init__(self, model, ranks: int = 1, queue: FakeQueue | None = None):
        self.model, self.ranks, self.queue = model, ranks, queue
        self._dispatch_info: dict = {}
        self.calls: list[int] = []

    def _query_dispatch_info(self, mesh: str) -> list[int]:
        assert mesh == "actor"
        return list(range(self.ranks))

    def compute_log_prob(self, data):
        meta = data if isinstance(data, KVBatchMeta) else None
        if meta is not None:
            data = self.queue.kv_batch_get(meta.keys, meta.partition_id, ["input_ids", "position_ids"])
            tu.assign_non_tensor(data, **meta.extra_info)
        self.calls.append(len(data))
        out = BatchData([self._rank(chunk) for chunk in BatchData(data).chunk(self.ranks)]).concat()
        if meta is None:
            return out
        return self.queue.kv_batch_put(meta.keys, meta.partition_id, out)

    def _rank(self, data):
        temperature = tu.get(data, "temperature")
        entropy = tu.get(data, "calculate_entropy", default=False)
        logprobs, entropies = [], []
        with torch.no_grad():
            for ids, positions in zip(data["input_ids"].unbind(), data["position_ids"].unbind()):
                logits = self.model(ids[None], position_ids=positions[None]).logits[0].float() / temperature
                logprobs.append(logprobs_from_logits(logits, torch.roll(ids, -1)))
                entropies.append(entropy_from_logits(logits))
        fields = {"log_probs": jagged(logprobs), **({"entropy": jagged(entropies)} if entropy else {})}
        return tu.get_tensordict(fields)
