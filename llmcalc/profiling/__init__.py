"""PyTorch lives here and only here: the reference model, FLOP counters, measurements."""
