"""Token batches: seeded synthetic tokens, or byte-level tokens of a text file so
the loss means something (a byte is a token; vocab >= 256)."""

from pathlib import Path

import torch

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
