"""Real measurements with torch.distributed: DDP GPT-2 steps and collective probes.

Workers run under torchrun (``torchrun ... -m realrun <verb>``) and write JSON-lines
records (schema in realrun/SCHEMA.md). This package never imports sim/ or
calibrate/; what it shares with them (model shapes) is data in scenarios/.
Importing it does not import torch: the launcher and the argument parsers are
torch-free so `ddplab` can validate arguments before starting any process.
"""
