"""What each command shows: one module per command, turning its estimate into a Document (JSON-able data
and tables with units and notes) that ``llmcalc.render`` prints. An overlay (fine-tuning, FP8, the transformers
fallback, a sharded profile) is a section of the view of the command it overlays."""
