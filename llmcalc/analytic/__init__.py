"""The formulas: pure Python, standard library only (no torch, numpy, pandas or matplotlib)."""
