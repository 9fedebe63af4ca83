"""A job's global batch against the batches published runs trained models of its size with:
what `--tokens` rests on. The days to train N tokens hold only where N tokens at this batch
reach the loss N tokens reached at theirs; past the critical batch size a larger batch needs
more tokens for the same loss (McCandlish et al. 2018, "An Empirical Model of Large-Batch
Training": steps S and examples E trade off as (S/S_min - 1)(E/E_min - 1) = 1). ddplab does not
model the loss, so it says how far the job's batch is from the published ones instead
(docs/references.md, "Published batch sizes").

    note = compare(params=760e6, tokens_per_step=16_777_216)
    note.ratio, note.far  # 33.6, True
"""

from typing import NamedTuple


class Published(NamedTuple):
    params: float  # the model's parameters, as its paper rounds them
    tokens: float  # its global batch in tokens
    run: str  # which run, and where it is printed


_GPT3 = "Brown et al. 2020, Table 2.1"
_LLAMA = "Touvron et al. 2023, Table 2"
PUBLISHED = (
    Published(125e6, 0.5e6, f"GPT-3 Small, 125M ({_GPT3})"),
    Published(350e6, 0.5e6, f"GPT-3 Medium, 350M ({_GPT3})"),
    Published(760e6, 0.5e6, f"GPT-3 Large, 760M ({_GPT3})"),
    Published(1.3e9, 1e6, f"GPT-3 XL, 1.3B ({_GPT3})"),
    Published(2.7e9, 1e6, f"GPT-3 2.7B ({_GPT3})"),
    Published(6.7e9, 2e6, f"GPT-3 6.7B ({_GPT3})"),
    Published(6.7e9, 4e6, f"LLaMA 7B ({_LLAMA})"),
    Published(13e9, 2e6, f"GPT-3 13B ({_GPT3})"),
    Published(13e9, 4e6, f"LLaMA 13B ({_LLAMA})"),
    Published(32.5e9, 4e6, f"LLaMA 33B ({_LLAMA})"),
    Published(65.2e9, 4e6, f"LLaMA 65B ({_LLAMA})"),
    Published(175e9, 3.2e6, f"GPT-3 175B ({_GPT3})"),
    # Its last batch: 4M tokens, 8M after 252M tokens, 16M after 2.87T (Grattafiori et al. 2024, Sec. 3.4.1).
    Published(405e9, 16e6, "Llama 3 405B, its last stage (Grattafiori et al. 2024, Sec. 3.4.1)"),
)
# Llama 3 405B's batch grew 4x during its training (4M to 16M tokens): a batch more than 4x the
# largest published for a model this size is past anything these runs tried.
FAR = 4.0


class BatchNote(NamedTuple):
    tokens_per_step: float
    reference: Published  # the largest published batch for a model no larger than this one
    ratio: float  # tokens_per_step / reference.tokens

    @property
    def far(self) -> bool:
        return self.ratio > FAR

    def as_dict(self) -> dict:
        return {"tokens_per_step": self.tokens_per_step, "reference_tokens": self.reference.tokens,
                "reference_run": self.reference.run, "ratio": self.ratio, "far": self.far}  # fmt: skip


def reference(params: float) -> Published:
    """The largest batch published for a model of at most ``params`` parameters (the smallest
    model's below them all), the nearest model in size among equal batches: no published model
    larger than another trained with a smaller batch than it, so this is the most generous
    comparison."""
    smaller = [p for p in PUBLISHED if p.params <= params] or [PUBLISHED[0]]
    return max(smaller, key=lambda p: (p.tokens, p.params))


def compare(*, params: float, tokens_per_step: float) -> BatchNote:
    ref = reference(params)
    return BatchNote(tokens_per_step, ref, tokens_per_step / ref.tokens)
