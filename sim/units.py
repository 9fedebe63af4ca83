"""Parsing and printing sizes and times the way nccl-tests users write them."""

import re

_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# 1 PiB: thousands of times any accelerator's memory, so no collective moves more; past it a
# size is a typo, and past ~1e308 its digits overflow a float (a traceback before this bound).
MAX_SIZE_BYTES = 1 << 50


def parse_size(text: str, key: str = "--sizes") -> int:
    """``"64M"`` -> 67108864. Suffixes are binary (K = 1024), as nccl-tests' -b/-e."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"{key}: expected a size like 1K, 16M or 1G, got {text!r}")
    value = float(m.group(1)) * _SUFFIX[m.group(2).upper()]
    if not 1 <= value <= MAX_SIZE_BYTES:
        raise ValueError(f"{key}: sizes must be 1 B to 1 PiB, got {text!r}")
    return int(value)


def parse_sizes(text: str, key: str = "--sizes") -> list[int]:
    """``"1M,16M,1G"`` or a geometric range ``"1K:256M"`` (x2 per step)."""
    if ":" in text:
        lo_s, _, hi_s = text.partition(":")
        lo, hi = parse_size(lo_s, key), parse_size(hi_s, key)
        if hi < lo:
            raise ValueError(f"{key}: range end below its start in {text!r}")
        out = [lo]
        while out[-1] * 2 <= hi:
            out.append(out[-1] * 2)
        return out
    return [parse_size(s, key) for s in text.split(",") if s.strip()] or [parse_size(text, key)]


# Parameter counts are decimal, as model names say them (gpt2 124M, 1.3B); B and G are both 1e9.
_COUNT_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
MAX_COUNT = 1e15  # a thousand times the largest published model: past it, a typo


def parse_count(text: str, key: str) -> float:
    """``"124M"`` -> 124e6, ``"1.3B"`` -> 1.3e9, ``"760e6"`` -> 760e6: a count such as a parameter count."""
    m = re.fullmatch(r"\s*((?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)\s*([KMBGT]?)\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"{key}: expected a count like 124M, 1.3B or 760e6, got {text!r}")
    value = float(m.group(1)) * _COUNT_SUFFIX[m.group(2).upper()]
    if not 1 <= value <= MAX_COUNT:  # also catches 1e999, which float() reads as infinity
        raise ValueError(f"{key}: must be 1 to {MAX_COUNT:.0e}, got {text!r}")
    return value


def parse_int_list(text: str, key: str) -> list[int]:
    try:
        values = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"{key}: expected integers like 2,8,64, got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{key}: expected positive integers like 2,8,64, got {text!r}")
    return values


def fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_seconds(s: float) -> str:
    """14.31 s, 0.036 s, 412 us: enough digits to read, no more."""
    if s >= 1.0:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s:.3f} s" if s >= 0.01 else f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.0f} us"


def fmt_count(n: float) -> str:
    """A parameter count as model names say it, decimal: 3.21B, 124M, 16.1M, 412K."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"
