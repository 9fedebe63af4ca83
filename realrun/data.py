"""Token batches: seeded synthetic tokens, or byte-level tokens of a text file so
the loss means something (a byte is a token; vocab >= 256). Built in the training loop
(Batches), or by a torch DataLoader with worker processes (Loader: --loader-workers), the
loading sim/loader.py models; --loader-delay-ms makes each batch slower to build."""

import itertools
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from realrun.footprint import check_data_file


class Batches:
    def __init__(self, *, vocab_size: int, seq_len: int, seed: int, rank: int, data_file: Path | None = None):
        self.vocab_size, self.seq_len = vocab_size, seq_len
        # One generator per rank, seeded from (seed, rank): ranks see different data, reproducibly.
        self.gen = torch.Generator().manual_seed(seed * 100_003 + rank)
        self.text = None
        if data_file is not None:
            check_data_file(data_file, vocab_size, seq_len)
            raw = Path(data_file).read_bytes()
            self.text = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()

    def next(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets), each (batch, seq_len); targets are inputs shifted by one."""
        if self.text is None:
            seq = torch.randint(0, self.vocab_size, (batch, self.seq_len + 1), generator=self.gen)
        else:
            starts = torch.randint(0, len(self.text) - self.seq_len - 1, (batch,), generator=self.gen)
            seq = torch.stack([self.text[s : s + self.seq_len + 1] for s in starts.tolist()])
        return seq[:, :-1], seq[:, 1:]


class _NumberedBatches(Dataset):
    """Batch i of a rank's stream, the same whichever worker builds it: its generator is seeded
    from (seed, rank, i), since each worker process holds its own copy of this object."""

    def __init__(self, batches: Batches, *, seed: int, rank: int, batch: int, delay_s: float):
        self.batches, self.base_seed, self.batch, self.delay_s = batches, seed * 100_003 + rank, batch, delay_s

    def __len__(self) -> int:
        return 1 << 62  # an endless stream: the loop takes as many as it steps

    def __getitem__(self, i: int):
        self.batches.gen.manual_seed(self.base_seed * 1_000_003 + i)
        if self.delay_s:
            time.sleep(self.delay_s)  # a slow loader's extra work, as an I/O wait
        return self.batches.next(self.batch)


class Loader:
    """Micro-batches from torch's DataLoader: ``workers`` processes, ``prefetch`` batches queued
    each (0 workers: built in the loop, blocking), each batch ``delay_s`` slower to build."""

    def __init__(
        self, batches: Batches, *, seed: int, rank: int, batch: int, workers: int, prefetch: int, delay_s: float
    ):
        data = _NumberedBatches(batches, seed=seed, rank=rank, batch=batch, delay_s=delay_s)
        ahead = {"prefetch_factor": prefetch, "persistent_workers": True} if workers else {}
        # batch_size=None: each index is a whole micro-batch, as the simulator counts them.
        loader = DataLoader(data, batch_size=None, sampler=itertools.count(), num_workers=workers, **ahead)
        self.it = iter(loader)

    def next(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        return next(self.it)
