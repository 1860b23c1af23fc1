"""The traffic a report's serving section sizes a deployment for: standard library only, so that the command line
and the report's run read it without the report's plotting libraries."""

from __future__ import annotations

from ..records import dataclass


@dataclass(frozen=True)
class ServingWorkload:
    """The traffic the serving section sizes a deployment for (`serve --input-len --output-len --max-concurrency
    --max-ttft --max-tpot`'s workload mode); several concurrencies draw the throughput-latency curve."""

    input_len: int = 1024
    output_len: int = 256
    concurrency: tuple[int, ...] = (64,)
    max_ttft: float | None = 2.0  # seconds, mean
    max_tpot: float | None = 0.05  # seconds per output token, mean

    def describe(self) -> str:
        targets = " and ".join(t for t in (
            f"mean TTFT <= {self.max_ttft:g} s" if self.max_ttft is not None else "",
            f"mean TPOT <= {self.max_tpot * 1000:g} ms" if self.max_tpot is not None else "") if t)
        return (f"{self.input_len:,} prompt tokens and {self.output_len:,} output tokens per request, "
                f"{max(self.concurrency):,} concurrent clients, within {targets}")
