"""Measured kernel latencies for serving (issue 36): NVIDIA aiconfigurator's per-kernel tables, read with the
standard library and interpolated as aiconfigurator's engine does.

Source: aiconfigurator-core 0.12.0 (Apache-2.0, github.com/ai-dynamo/aiconfigurator), tables measured inside vLLM
(latest vLLM version per table in that release, e.g. 0.24.0 on H100/H200), shipped here as
``llmcalc/data/kernels/<gpu>/<section>.json.gz`` by ``benchmarks/extract_aiconfigurator.py``
(``llmcalc/data/kernels/NOTICE`` says what was kept): one file per section (``spec``, ``gemm``,
``generation_attention``, ...), each read on the first question that needs it, never at start-up (a dense model's
decode reads its attention table alone, not the GEMM and MoE tables beside it).

How a value between grid points is found, ported from the engine's Rust source
(aic-core/rust/aiconfigurator-core/src/perf_database/perf_interp.rs, gemm.rs, attention.rs, communication.rs @095f58a):

- an exact grid point is returned as measured;
- GEMM (``ScatteredSites``): each collected (n, k) owns a curve in m, blended linearly in m (raw latency); past the
  curve's ends the median utilisation (SOL / latency) of the 3 end points is held and latency = SOL(query) / util;
  an (n, k) not collected borrows the utilisation of the 4 nearest collected (n, k) whose curve covers m, weighted
  1/d² with d the distance in log2(n), log2(k), none further than 2 octaves (no such site: ``KernelTableError``);
  every stored point is first raised to its SOL (the engine's ``clamp_gemm_grids_to_sol``);
- attention (``Grid``): axis by axis, bracket and blend linearly in the coordinate; prefill blends sqrt(latency)
  along the sequence axis (its ~s² curvature) and raw latency along heads and batch, decode raw everywhere; a
  bracket side missing (ragged table) keeps the other scaled by the SOL ratio; past the grid, the utilisation of
  the 4 nearest points in joint log2 space (modified-Shepard weights ((R - d) / (R d))², R the 5th distance) is held;
- collectives: one curve per GPU count, linear in message size; past its ends latency scales with size from the
  end point (the engine's linear SOL proxy, k_tail 1).

Interpolation is linear in the coordinates, not in log space: log2 distances only choose and weight neighbours.
SOL (speed of light, ms) is the engine's own roofline from the system file's datasheet peaks (``spec`` in each
table file): GEMM max(2mnk / tc_flops, bytes·(mn + mk + nk) / mem_bw); attention as ``context_attention_sol`` and
``generation_attention_sol``. Every public function answers in seconds.
"""

from __future__ import annotations

import bisect
import functools
import gzip
import heapq
import json
import math
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from ..errors import LlmcalcError

DATA = Path(__file__).resolve().parent.parent / "data" / "kernels"
# llmcalc preset names (presets/hardware/) -> aiconfigurator system names.
ALIASES = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "h200-sxm": "h200_sxm", "b200": "b200_sxm",
           "a100-80gb-sxm": "a100_sxm", "a100-sxm": "a100_sxm"}
DTYPE_BYTES = {"bf16": 2.0, "fp8": 1.0, "nvfp4": 0.5 + 1 / 16}  # nvfp4: e2m1 pairs a byte + an fp8 scale per 16
GEMM_NN_SITES, GEMM_MAX_OCTAVES, GEMM_K_TAIL = 4, 2.0, 3
GRID_NN_LEAVES = 4
TC_PEAK = {"nvfp4": "fp4"}  # a GEMM dtype -> the tensor-core peak it runs at (the system file's <peak>_tc_flops)


class KernelTableError(LlmcalcError):
    """No measured table answers this question (GPU, dtype, shape)."""


BACKENDS = ("vllm", "trtllm", "sglang")  # whose measurements: <gpu>/ (vLLM), <gpu>.<backend>/


def available_gpus(backend: str = "vllm") -> list[str]:
    """The aiconfigurator system names with a shipped table measured inside `backend`."""
    names = (p.name for p in DATA.iterdir() if p.is_dir())
    if backend == "vllm":
        return sorted(n for n in names if "." not in n)
    return sorted(n.removesuffix(f".{backend}") for n in names if n.endswith(f".{backend}"))


def has_tables(gpu: str, backend: str = "vllm") -> bool:
    """Whether `gpu` (an llmcalc or aiconfigurator name) has a shipped table measured in `backend`; nothing is read."""
    try:
        _system(gpu, backend)
    except KernelTableError:
        return False
    return True


def source(gpu: str, backend: str = "vllm") -> str:
    """The table name of `gpu`'s kernels measured inside `backend` ("h100_sxm", "h100_sxm.trtllm"), which every
    function here takes in place of a GPU name (KernelTableError when none is shipped)."""
    return _system(gpu, backend)


@cache  # a file-system look-up per call otherwise (the simulation asks the tables thousands of times)
def _system(gpu: str, backend: str = "vllm") -> str:
    name = ALIASES.get(gpu.lower(), gpu.lower().replace("-", "_"))
    if backend != "vllm" and "." not in name:
        name = f"{name}.{backend}"
    if not (DATA / name).is_dir():
        whose = "" if backend == "vllm" else f" {backend}"
        raise KernelTableError(f"no measured{whose} kernel table for GPU {gpu!r}; tables exist for "
                               f"{', '.join(available_gpus(backend)) or 'none'} (and the llmcalc names "
                               f"{', '.join(sorted(ALIASES))})")
    return name


def table(gpu: str) -> Mapping[str, Any]:
    """The tables of one GPU (aiconfigurator system name or llmcalc preset name) by section, each section read on
    first use (``Sections``)."""
    return _sections(_system(gpu))


class Sections(Mapping[str, Any]):
    """One GPU's shipped tables, a read-only mapping of section name to its content: `system`'s folder, each
    ``<section>.json.gz`` parsed when first asked for (``_load``) and kept."""

    def __init__(self, system: str) -> None:
        self.system = system
        self.names = frozenset(p.name.removesuffix(".json.gz") for p in (DATA / system).glob("*.json.gz"))

    def __getitem__(self, name: str) -> Any:
        if name not in self.names:
            raise KeyError(name)
        return _load(self.system, name)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.names))

    def __len__(self) -> int:
        return len(self.names)


@cache
def _sections(system: str) -> Sections:
    return Sections(system)


@cache
def _load(system: str, name: str) -> Any:
    text = gzip.decompress((DATA / system / f"{name}.json.gz").read_bytes()).decode()  # (faster than "rt")
    return Members(text) if text.startswith("{") else json.loads(text)


_NOT_BRACKET = bytes(c for c in range(128) if chr(c) not in "[]{}")
_NOT_MARK = bytes(c for c in range(128) if chr(c) not in '[]{}"')


def _plain_json(text: str) -> bytes:
    """`text`'s bytes where it is plain, ASCII JSON whose strings hold no backslash (no escapes) and no bracket (so
    that the brackets outside strings are all its brackets), else b"". With the text's quotes and brackets alone, the
    strings' quote pairs are adjacent exactly when no string holds a bracket: taking adjacent pairs away left to right
    (the first quote can only pair with the second, and so on) then leaves no quote."""
    if "\\" in text or not text.isascii():
        return b""
    raw = text.encode()
    return b"" if b'"' in raw.translate(None, _NOT_MARK).replace(b'""', b"") else raw


class Members(Mapping[str, Any]):
    """A section's JSON object, or one of its members' (the text from `start`), each member's value parsed when first
    asked for: a run reads one key of the GEMM table (its dtype's sweep) and one grid of each attention table, not
    all. The value is the one ``json.loads`` holds there, found where the text shows it without doubt: plain text
    (``_plain_json``), ``"key":`` once in it, after `start`, an even count of quotes between (a string starts
    there), and the brackets between the object's own brace and it all closed, adjacent pairs taken away until none
    is left (the key its member, not a deeper one's nor a later sibling's, whose own brace would close first). A
    section's members that are objects are Members in turn (whose values are parsed whole). Anything else (a key
    spelled twice, an escape, iteration) parses the object's whole text once."""

    def __init__(self, text: str, start: int = 0, raw: bytes | None = None) -> None:
        self.text, self.start, self.raw = text, start, raw  # raw: the text's bytes where plain (found on first use)
        self.parsed: dict[str, Any] = {}
        self.whole: dict[str, Any] | None = None

    def _all(self) -> dict[str, Any]:
        if self.whole is None:
            self.whole = _DECODER.raw_decode(self.text, self.start)[0] if self.start else json.loads(self.text)
        return self.whole

    def _plain(self) -> bool:
        if self.raw is None:
            self.raw = _plain_json(self.text)
        return bool(self.raw)

    def _member(self, key: str) -> int | None:
        """Where this object's member `key` starts its value, or None where the text does not show it alone."""
        text, mark = self.text, f'"{key}":'
        at = text.find(mark, self.start)
        if at < 0 or text.find(mark) != at or text.find(mark, at + 1) >= 0 or text.count('"', self.start, at) % 2:
            return None
        inside = self.raw[self.start + 1:at].translate(None, _NOT_BRACKET)  # type: ignore[index]
        while (closed := inside.replace(b"[]", b"").replace(b"{}", b"")) != inside:
            inside = closed
        return at + len(mark) if not inside else None  # every bracket after the object's own brace closed

    def __getitem__(self, key: str) -> Any:
        if self.whole is not None or not isinstance(key, str):
            return self._all()[key]
        if key not in self.parsed:
            if not self._plain():
                return self._all()[key]
            if f'"{key}"' not in self.text:  # no such string at all: no such member
                raise KeyError(key)
            at = self._member(key)
            if at is None:
                return self._all()[key]
            if self.start == 0 and self.text.startswith("{", at):
                self.parsed[key] = Members(self.text, at, self.raw)
            else:
                try:
                    self.parsed[key] = _DECODER.raw_decode(self.text, at)[0]
                except json.JSONDecodeError:
                    return self._all()[key]
        return self.parsed[key]

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


_DECODER = json.JSONDecoder()  # json.loads' own (no hooks): the same floats and ints


def _part(gpu: str, name: str, key: str) -> Any:
    part = table(gpu).get(name, {})
    if key not in part:
        have = sorted(k for k in part if k not in ("version", "kernel_source"))
        raise KernelTableError(f"{_system(gpu)} has no measured {name} table for {key!r} (has {have or 'none'})")
    return part[key]


# --- speed of light (ms), the engine's rooflines -------------------------------------------------------


@cache  # a datasheet figure, read at every SOL (thousands of times a simulation)
def _tc_flops(gpu: str, dtype: str) -> float:
    spec = table(gpu)["spec"]
    flops = spec.get(f"{TC_PEAK.get(dtype, dtype)}_tc_flops")
    if not flops:
        raise KernelTableError(f"{_system(gpu)} lists no {dtype} tensor-core peak")
    return float(flops)


@cache  # a datasheet figure, read at every SOL (thousands of times a simulation)
def _mem_bw(gpu: str) -> float:
    return float(table(gpu)["spec"]["mem_bw"])


def gemm_sol_ms(gpu: str, m: float, n: float, k: float, dtype: str) -> float:
    """aiconfigurator gemm.rs gemm_sol_with_flops: max(2mnk / tc_flops, bytes·(mn + mk + nk) / mem_bw), in ms."""
    math_ms = 2.0 * m * n * k / _tc_flops(gpu, dtype) * 1e3
    mem_ms = DTYPE_BYTES[dtype] * (m * n + m * k + n * k) / _mem_bw(gpu) * 1e3
    return max(math_ms, mem_ms)


def _context_sol(gpu: str, n_kv: int, head: int, kv_bytes: float, c: list[float]) -> float:
    """attention.rs context_attention_sol at prefix 0 (causal: half the s² pairs), c = [heads, seq, batch]."""
    n, s, b = c
    kv = n if n_kv == 0 else n_kv
    ops = 2.0 * b * s * s * n * head * 2.0 / 2.0
    mem = 2.0 * b * (2.0 * n * s * head) + kv_bytes * b * (2.0 * kv * s * head)
    return max(ops / _tc_flops(gpu, "bf16"), mem / _mem_bw(gpu)) * 1e3


def _generation_sol(gpu: str, n_kv: int, head: int, kv_bytes: float, c: list[float]) -> float:
    """attention.rs generation_attention_sol (flops at the bf16 peak, or fp8's for an fp8 cache), c = [heads, batch,
    kv length]."""
    n, b, s = c
    kv = n if n_kv == 0 else n_kv
    ops = 2.0 * b * n * head * 2.0 * (s - 1.0)
    mem = b * (n * head * 2.0 + 2.0 * kv * (s - 1.0) * head * kv_bytes + n * head * 2.0)
    flops = _tc_flops(gpu, "fp8" if kv_bytes == 1.0 else "bf16")
    return max(ops / flops, mem / _mem_bw(gpu)) * 1e3


# --- GEMM: scattered (n, k) sites, each a curve in m --------------------------------------------------


@cache
def _gemm_sites(gpu: str, dtype: str) -> dict[tuple[int, int], tuple[list[int], list[float]]]:
    """The measured (n, k) sites, each its sweep's (m, latency ms) as the table holds them (``_site_curve``: held to
    the speed of light)."""
    sites = {}
    for key, curve in _part(gpu, "gemm", dtype)["sites"].items():
        n, k = key.split(",")
        sites[(int(n), int(k))] = curve
    return sites


@cache  # a site's curve, clamped once where a step first reads it (not every site's at load)
def _site_curve(gpu: str, dtype: str, site: tuple[int, int]) -> tuple[list[int], list[float]]:
    """One site's sweep, each latency at least the GEMM's speed of light (``gemm_sol_ms``)."""
    ms, lats = _gemm_sites(gpu, dtype)[site]
    return ms, [max(lat, gemm_sol_ms(gpu, m, *site, dtype)) for m, lat in zip(ms, lats, strict=True)]


def _curve_ms(gpu: str, dtype: str, site: tuple[int, int], m: float) -> float:
    ms, lats = _site_curve(gpu, dtype, site)
    i = bisect.bisect_left(ms, m)
    if i < len(ms) and ms[i] == m:
        return lats[i]
    if m < ms[0] or m > ms[-1] or len(ms) < 2:  # beyond the sweep: hold the median util of the 3 end points
        tail = range(min(GEMM_K_TAIL, len(ms))) if m < ms[0] else range(max(len(ms) - GEMM_K_TAIL, 0), len(ms))
        utils = sorted(gemm_sol_ms(gpu, ms[j], *site, dtype) / lats[j] for j in tail)
        half = len(utils) // 2
        util = utils[half] if len(utils) % 2 else (utils[half - 1] + utils[half]) / 2
        return gemm_sol_ms(gpu, m, *site, dtype) / util
    w = (m - ms[i - 1]) / (ms[i] - ms[i - 1])
    return lats[i - 1] + (lats[i] - lats[i - 1]) * w


@cache  # a step's GEMMs ask the same few (n, k) at every m
def _near_sites(gpu: str, dtype: str, n: float, k: float) -> list[tuple[float, tuple[int, int]]]:
    """The measured (n, k) sites within GEMM_MAX_OCTAVES of (n, k) in joint log2 space, nearest first, as (distance,
    site) (``gemm_ms``' ranking, which then keeps those whose sweep covers its m)."""
    q = (math.log2(n), math.log2(k))
    ranked = [(math.dist(q, (math.log2(site[0]), math.log2(site[1]))), site) for site in _gemm_sites(gpu, dtype)]
    return sorted(r for r in ranked if r[0] <= GEMM_MAX_OCTAVES)


def gemm_ms(gpu: str, m: float, n: float, k: float, dtype: str = "bf16") -> float:
    """Latency in ms of one (m x k) @ (k x n) GEMM as vLLM runs it (bf16: torch.nn.functional.linear; fp8: per-tensor
    scaled CUTLASS), aiconfigurator's ScatteredSites resolution (module docstring)."""
    sites = _gemm_sites(gpu, dtype)
    if (n, k) in sites:
        return _curve_ms(gpu, dtype, (int(n), int(k)), m)
    ranked = []
    for d, site in _near_sites(gpu, dtype, n, k):  # nearest first: the first GEMM_NN_SITES whose sweep covers m
        ms = sites[site][0]
        if ms[0] <= m <= ms[-1]:
            ranked.append((d, site))
            if len(ranked) == GEMM_NN_SITES:
                break
    if not ranked:
        raise KernelTableError(f"{_system(gpu)} {dtype} GEMM: no measured (n, k) within {GEMM_MAX_OCTAVES:g} octaves "
                               f"of ({n:g}, {k:g}) covering m = {m:g}")
    wsum = util = 0.0
    for d, site in ranked:
        w = 1.0 / (d * d + 1e-12)
        util += w * gemm_sol_ms(gpu, m, *site, dtype) / _curve_ms(gpu, dtype, site, m)
        wsum += w
    return gemm_sol_ms(gpu, m, n, k, dtype) / (util / wsum)


def gemm_seconds(gpu: str, m: float, n: float, k: float, dtype: str = "bf16") -> float:
    """Seconds of one (m x k) @ (k x n) GEMM on `gpu` (m tokens, n output and k input features), measured in the
    table's engine (aiconfigurator-core 0.12.0); dtype "bf16", "fp8" (per-tensor scaled) or, on Blackwell under
    TensorRT-LLM, "nvfp4" (its NVFP4 linear: fp4_quantize of the activations, then nvfp4_gemm)."""
    return gemm_ms(gpu, m, n, k, dtype) / 1e3


# --- attention: nested grids ---------------------------------------------------------------------------


def _grid(gpu: str, name: str, key: str) -> dict[int, Any]:
    return _int_grid(gpu, name, key)


@cache
def _int_grid(gpu: str, name: str, key: str) -> dict[int, Any]:
    def convert(node: Any) -> Any:
        return {int(k): convert(v) for k, v in node.items()} if isinstance(node, dict) else node
    grids = table(gpu).get(name, {}).get("grids", {})
    if key not in grids:
        raise KernelTableError(f"{_system(gpu)} has no measured {name} for (kv dtype/kv heads/head dim) {key!r} "
                               f"(kv heads 0 = as many as query heads); has {sorted(grids)}")
    converted: dict[int, Any] = convert(grids[key])
    return converted


@cache
def _key_tree(gpu: str, name: str, key: str) -> Any:
    """One grid (``_grid``) with each node's keys sorted once: (keys ascending, a child for each), the last level's
    children the latencies (what ``_interior`` walks, read once per grid)."""
    def build(node: Any) -> Any:
        if not isinstance(node, dict):
            return float(node)
        keys = sorted(node)
        return keys, [build(node[k]) for k in keys]

    return build(_grid(gpu, name, key))


def _interior(node: Any, c: list[float], depth: int, sqrt_axis: int | None, sol: Any) -> float | None:
    """The grid below `node` at `c` from axis `depth` on (module docstring: bracket and blend); None past its edge."""
    if depth == len(c):
        return node
    keys, children = node
    x = c[depth]
    i = bisect.bisect_left(keys, x)
    if i < len(keys) and keys[i] == x:  # an exact key collapses this axis
        return _interior(children[i], c, depth + 1, sqrt_axis, sol)
    if i == 0 or i == len(keys):
        return None
    lo, hi = keys[i - 1], keys[i]
    below = _interior(children[i - 1], c, depth + 1, sqrt_axis, sol)
    above = _interior(children[i], c, depth + 1, sqrt_axis, sol)
    if below is None or above is None:  # ragged: hold the survivor's util across this axis
        if below is None and above is None:
            return None
        key, lat = (hi, above) if below is None else (lo, below)
        snapped = list(c)
        snapped[depth] = key
        return lat * sol(c) / sol(snapped)
    w = (x - lo) / (hi - lo)
    if depth == sqrt_axis:
        return (math.sqrt(below) + (math.sqrt(above) - math.sqrt(below)) * w) ** 2
    return below + (above - below) * w


def _leaves(node: dict[int, Any], path: tuple[int, ...] = ()) -> Any:
    for key, child in node.items():
        if isinstance(child, dict):
            yield from _leaves(child, path + (key,))
        else:
            yield path + (key,), child


@cache
def _log_leaves(gpu: str, name: str, key: str) -> tuple[tuple[list[float], tuple[int, ...], float], ...]:
    """The measured leaves (latency > 0) of one grid with their coordinates in log2 space, read once per grid."""
    return tuple(([math.log2(max(v, 1e-12)) for v in p], p, lat) for p, lat in _leaves(_grid(gpu, name, key))
                 if lat > 0)


@cache
def _leaf_tree(gpu: str, name: str, key: str) -> Any:
    """The measured leaves of one grid (``_log_leaves``) as a tree by their log2 coordinates, axis by axis: each node
    (its coordinates ascending, a child for each), the last level's children the leaves themselves."""
    def build(leaves: list[Any], depth: int) -> Any:
        if not leaves or depth == len(leaves[0][0]):
            return leaves
        by: dict[float, list[Any]] = {}
        for leaf in leaves:
            by.setdefault(leaf[0][depth], []).append(leaf)
        keys = sorted(by)
        return keys, [build(by[x], depth + 1) for x in keys]

    return build(list(_log_leaves(gpu, name, key)), 0)


def _nearest_leaves(where: tuple[str, str, str], q: list[float], k: int, last_hi: float | None = None) -> list[Any]:
    """The leaves of `where` that can be among the `k` nearest to `q` in joint log2 space: every leaf no further than
    the k-th nearest, ties included (a superset, ranked by the caller); with `last_hi`, to every point that has q's
    coordinates but the last anywhere in [q[-1], last_hi] (one search for decode's context samples). Branch and
    bound down ``_leaf_tree``: on each axis the coordinates are taken outward from q's, and a side is left where the
    squared distance of the axes so far already passes the k-th best found (the k-th smallest farthest distance
    from the points, for a span: no leaf beyond it can be among any point's k nearest)."""
    out: list[Any] = []
    best: list[float] = []  # the k smallest squared distances so far, negated (a max-heap)
    bound = math.inf
    a, last = q[-1], len(q) - 1
    b = a if last_hi is None else last_hi

    def take(leaves: list[Any], far: float) -> None:
        nonlocal bound
        out.extend(leaves)
        for _ in leaves:
            if len(best) < k:
                heapq.heappush(best, -far)
            elif far < -best[0]:
                heapq.heapreplace(best, -far)
        if len(best) == k:
            bound = -best[0] * (1 + 1e-9) + 1e-12  # slack: math.dist ranks the candidates after

    def visit(node: Any, depth: int, partial: float) -> None:
        keys, children = node
        if depth == last:  # the span [a, b]: from its inside outward, up then down
            j = bisect.bisect_left(keys, a)
            for i in range(j, len(keys)):
                if partial + max(0.0, keys[i] - b) ** 2 > bound:
                    break
                take(children[i], partial + max(keys[i] - a, keys[i] - b, b - keys[i]) ** 2)
            for i in range(j - 1, -1, -1):
                if partial + (a - keys[i]) ** 2 > bound:
                    break
                take(children[i], partial + (b - keys[i]) ** 2)
            return
        x = q[depth]
        hi = bisect.bisect_left(keys, x)
        lo = hi - 1
        while lo >= 0 or hi < len(keys):  # the nearer side first, so that the bound tightens soonest
            right = lo < 0 or (hi < len(keys) and keys[hi] - x <= x - keys[lo])
            i = hi if right else lo
            d2 = partial + (keys[i] - x) ** 2
            if d2 > bound:
                break  # (the other side is further still)
            visit(children[i], depth + 1, d2)
            if right:
                hi += 1
            else:
                lo -= 1

    tree = _leaf_tree(*where)
    if tree:
        visit(tree, 0, 0.0)
    return out


def _hold(where: tuple[str, str, str], c: list[float], sol: Any, span: Any = None) -> float:
    """perf_interp.rs grid_hold: util of the 4 nearest points in joint log2 space, modified-Shepard weights
    (`span`, when given: a function of no argument answering leaves among which they are, ``_nearest_leaves``)."""
    q = [math.log2(max(v, 1e-12)) for v in c]
    near = span() if span is not None else _nearest_leaves(where, q, GRID_NN_LEAVES + 1)
    # (heapq.nsmallest's answer, sorted(...)[:n] by its definition: faster over the few candidates found)
    picked = sorted([(math.dist(q, lq), p, lat) for lq, p, lat in near])[:GRID_NN_LEAVES + 1]
    radius = picked[GRID_NN_LEAVES][0] if len(picked) > GRID_NN_LEAVES else math.inf
    picked = picked[:GRID_NN_LEAVES]
    weights = [1.0 / (d * d + 1e-12) if math.isinf(radius) else (max(radius - d, 0.0) / (radius * d + 1e-12)) ** 2
               for d, _, _ in picked]
    if sum(weights) <= 0:
        weights = [1.0] * len(picked)
    sols = _leaf_sols(*where)  # sol(list(p)) of each leaf
    util = sum(w * sols[p] / lat for w, (_, p, lat) in zip(weights, picked, strict=True)) / sum(weights)
    return float(sol(c) / util)


def _resolve(where: tuple[str, str, str], c: list[float], sqrt_axis: int | None, span: Any = None) -> float:
    """The grid `where` = (gpu, table, key) at point `c`: interpolated inside, held (``_hold``) outside, each by the
    grid's speed of light (``_grid_sol``)."""
    sol = _grid_sol(*where)
    inside = _interior(_key_tree(*where), c, 0, sqrt_axis, sol)
    return _hold(where, c, sol, span) if inside is None else inside


@cache  # (a closure per grid, as each table's function made one per call)
def _grid_sol(gpu: str, name: str, key: str) -> Any:
    """The speed of light (ms) at a point of the grid (gpu, name, key), what its key says of the kernel: the
    attention grids' kv dtype / kv heads (0: as many as the query heads) / head dim (``_context_sol``,
    ``_generation_sol``), the MLA blocks' kv dtype / GEMM dtype (``_mla_module_sol``), the bare MLA kernel's kv dtype
    (``_generation_mla_sol``)."""
    if name in ("context_attention", "generation_attention"):
        kv_dtype, n_kv, head = key.split("/")
        attention = _context_sol if name == "context_attention" else _generation_sol
        return functools.partial(attention, gpu, int(n_kv), int(head), DTYPE_BYTES[kv_dtype])
    if name in ("mla_context_module", "mla_generation_module"):
        kv, gemm = key.split("/")
        return functools.partial(_mla_module_sol, gpu, gemm, DTYPE_BYTES.get(kv, 2.0),
                                 context=name == "mla_context_module")
    if name == "generation_mla":
        return functools.partial(_generation_mla_sol, gpu, DTYPE_BYTES[key])
    raise KernelTableError(f"no speed of light for table {name!r}")


@cache  # a grid's leaves are fixed: their speed of light once, not at each hold past the edge
def _leaf_sols(gpu: str, name: str, key: str) -> dict[tuple[int, ...], float]:
    """Each measured leaf's speed of light (``_grid_sol`` at its coordinates), what ``_hold`` weighs its util by."""
    sol = _grid_sol(gpu, name, key)
    return {p: sol(list(p)) for _, p, _ in _log_leaves(gpu, name, key)}


def _kv_key(heads: int, kv_heads: int, head_dim: int, kv_dtype: str) -> tuple[str, int]:
    n_kv = 0 if kv_heads == heads else kv_heads  # aiconfigurator's MHA sentinel
    if kv_dtype not in DTYPE_BYTES:
        raise KernelTableError(f"kv dtype {kv_dtype!r}: tables hold {sorted(DTYPE_BYTES)}")
    return f"{kv_dtype}/{n_kv}/{head_dim}", n_kv


def prefill_attention_ms(gpu: str, batch: int, seq: int, heads: int, kv_heads: int, head_dim: int = 128,
                         kv_dtype: str = "bf16") -> float:
    """Latency in ms of one layer's causal prefill attention (vLLM FlashAttention, bf16 compute, no prefix, no sliding
    window) over `batch` sequences of `seq` tokens with `heads` query and `kv_heads` KV heads per GPU; the raw table
    value, without the fused extras aiconfigurator's op adds (qk-norm, rope, KV writes)."""
    key, _ = _kv_key(heads, kv_heads, head_dim, kv_dtype)
    return _resolve((gpu, "context_attention", key), [heads, seq, batch], 1)


def prefill_attention_seconds(gpu: str, batch: int, seq: int, heads: int, kv_heads: int, head_dim: int = 128,
                              kv_dtype: str = "bf16") -> float:
    """Seconds of one layer's prefill attention (``prefill_attention_ms``)."""
    return prefill_attention_ms(gpu, batch, seq, heads, kv_heads=kv_heads, head_dim=head_dim, kv_dtype=kv_dtype) / 1e3


def decode_attention_ms(gpu: str, batch: int, context: int, heads: int, kv_heads: int, head_dim: int = 128,
                        kv_dtype: str = "bf16", smooth: bool = True) -> float:
    """Latency in ms of one layer's decode attention step: `batch` sequences each attending over `context` cached
    tokens (the table's isl + step), `heads` / `kv_heads` per GPU, KV cache in `kv_dtype` ("bf16" or "fp8").
    `smooth` averages 5 context lengths over ±10 % as aiconfigurator's query_generation does (a request's context
    drifts while it decodes); smooth=False is the table's own interpolation."""
    key, _ = _kv_key(heads, kv_heads, head_dim, kv_dtype)
    grid = (gpu, "generation_attention", key)
    if not smooth:
        return _resolve(grid, [heads, batch, context], None)
    lo = max(1, int(context * 0.9))
    hi = max(lo, int(context * 1.1))
    samples = [lo + (hi - lo) * i // 4 for i in range(5)]
    found: list[Any] = []

    def span() -> list[Any]:  # the leaves nearest to any sample past the grid's edge, found once for the five
        if not found:
            found.append(_nearest_leaves(grid, [math.log2(max(v, 1e-12)) for v in (heads, batch, lo)],
                                         GRID_NN_LEAVES + 1, last_hi=math.log2(max(hi, 1e-12))))
        return found[0]

    return sum(_resolve(grid, [heads, batch, s], None, span) for s in samples) / 5


def decode_attention_seconds(gpu: str, batch: int, context: int, heads: int, kv_heads: int, head_dim: int = 128,
                             kv_dtype: str = "bf16", smooth: bool = True) -> float:
    """Seconds of one layer's decode attention step (``decode_attention_ms``)."""
    return decode_attention_ms(gpu, batch, context, heads, kv_heads=kv_heads, head_dim=head_dim, kv_dtype=kv_dtype,
                               smooth=smooth) / 1e3


# --- tensor-parallel all-reduce -------------------------------------------------------------------------


def allreduce_ms(gpu: str, nbytes: float, n_gpus: int, kind: str = "custom") -> float:
    """Latency in ms of an all-reduce of `nbytes` (bf16/fp16 payload, 2 bytes an element) over `n_gpus` GPUs of one
    node: kind "custom" is vLLM's custom all-reduce (CUDA-graph captured), "nccl" NCCL's all_reduce (nccl-tests
    style, at the system's NCCL version). Linear in size between measured sizes; beyond them, proportional to size
    from the end point (the engine's k_tail 1 util hold with a linear SOL)."""
    if n_gpus <= 1:
        return 0.0
    name = {"custom": "custom_allreduce", "nccl": "nccl_all_reduce"}.get(kind)
    if name is None:
        raise KernelTableError(f"all-reduce kind {kind!r}: 'custom' or 'nccl'")
    curves = _part(gpu, name, "curves")
    if str(n_gpus) not in curves:
        raise KernelTableError(f"{_system(gpu)} {name}: measured for {sorted(curves, key=int)} GPUs, not {n_gpus}")
    sizes, lats = curves[str(n_gpus)]
    x = nbytes / 2.0  # the tables' message_size counts 16-bit elements
    i = bisect.bisect_left(sizes, x)
    if i < len(sizes) and sizes[i] == x:
        return float(lats[i])
    if x < sizes[0]:
        return float(lats[0] * x / sizes[0])
    if x > sizes[-1]:
        return float(lats[-1] * x / sizes[-1])
    w = (x - sizes[i - 1]) / (sizes[i] - sizes[i - 1])
    return float(lats[i - 1] + (lats[i] - lats[i - 1]) * w)


def allreduce_seconds(gpu: str, nbytes: float, n_gpus: int, kind: str = "custom") -> float:
    """Seconds of an all-reduce of `nbytes` over `n_gpus` GPUs (``allreduce_ms``)."""
    return allreduce_ms(gpu, nbytes, n_gpus, kind) / 1e3


# --- fused MoE (TensorRT-LLM and SGLang tables) ---------------------------------------------------------


def token_curve(counts: list[float], lats: list[float], tokens: float) -> float:
    """A measured latency curve over token counts read at `tokens`: linear between measured counts, held at the
    first below it, proportional to tokens past the last (compute-bound there)."""
    i = bisect.bisect_left(counts, tokens)
    if i < len(counts) and counts[i] == tokens:
        return float(lats[i])
    if tokens < counts[0]:
        return float(lats[0])
    if tokens > counts[-1]:
        return float(lats[-1] * tokens / counts[-1])
    w = (tokens - counts[i - 1]) / (counts[i] - counts[i - 1])
    return float(lats[i - 1] + (lats[i] - lats[i - 1]) * w)


def moe_key(dtype: str, hidden: int, inter: int, topk: int, experts: int, moe_tp: int, moe_ep: int) -> str:
    """The table's key of one MoE layer shape (dtype "bf16", "fp8", "fp8_block", "nvfp4", "w4a16_mxfp4", ...)."""
    return "/".join(str(v) for v in (dtype, hidden, inter, topk, experts, moe_tp, moe_ep))


def moe_ms(gpu: str, tokens: float, key: str) -> float:
    """Latency in ms of one MoE layer's routed experts (router output to combined output: the grouped GEMMs of
    every expert the tokens hit, their activation and the gather/scatter, on one rank holding 1/(moe_tp x moe_ep) of
    them) over `tokens` tokens, as the engine's fused-MoE kernel ran it (aiconfigurator's op `moe`, routing drawn
    from its power-law distribution with alpha 1.01, the file's ``distribution``); `key` from ``moe_key``, its shape
    measured as such (no neighbour is borrowed: KernelTableError); read along its token curve (``token_curve``)."""
    curves = _part(gpu, "moe", "curves")
    if key not in curves:
        raise KernelTableError(f"{_system(gpu)} has no measured MoE layer {key!r}")
    counts, lats = curves[key]
    return token_curve(counts, lats, tokens)


def moe_seconds(gpu: str, tokens: float, key: str) -> float:
    """Seconds of one MoE layer's routed experts (``moe_ms``)."""
    return moe_ms(gpu, tokens, key) / 1e3


# --- DeepSeek-V3's whole MLA attention block (vLLM and TensorRT-LLM tables) ----------------------------

# The block the module tables measured (aiconfigurator collector/vllm/collect_mla_module.py: vLLM's own
# DeepseekV2MLAAttention built from DeepSeek-V3's config with the rank's heads): hidden 7168, q_lora_rank 1536,
# kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128.
MLA_MODULE_SHAPE = {"hidden": 7168, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128}
MLA_GEMM_BYTES = {"bf16": 2.0, "fp8_block": 1.0}


def mla_module_key(kv_dtype: str, gemm: str) -> str:
    """The module tables' key: KV-cache dtype ("bf16", "fp8") / projection GEMM dtype ("bf16", "fp8_block")."""
    return f"{kv_dtype}/{gemm}"


def _mla_weights(heads: float) -> float:
    """Parameters of one rank's MLA block with `heads` query heads: the replicated fused q_a + kv_a down-projection
    (hidden x (q_lora + kv_lora + rope)), q_b (q_lora x heads x (nope + rope)), kv_b (kv_lora x heads x (nope + v))
    and o_proj (heads x v x hidden)."""
    s = MLA_MODULE_SHAPE
    down = s["hidden"] * (s["q_lora_rank"] + s["kv_lora_rank"] + s["qk_rope_head_dim"])
    q_b = s["q_lora_rank"] * heads * (s["qk_nope_head_dim"] + s["qk_rope_head_dim"])
    kv_b = s["kv_lora_rank"] * heads * (s["qk_nope_head_dim"] + s["v_head_dim"])
    return down + q_b + kv_b + heads * s["v_head_dim"] * s["hidden"]


def _mla_module_sol(gpu: str, gemm: str, kv_bytes: float, c: list[float], *, context: bool) -> float:
    """A roofline of the MLA block (ms), used only to carry a measured point's utilisation to a query the grid does
    not bracket: context c = [heads, seq, batch], the projections' 2 FLOPs per weight per token and causal attention
    (2 x 2 x (nope + rope ... ) ~ 4 x 192 FLOPs per pair per head); generation c = [heads, batch, kv length], the
    absorbed form over the latent (2 x (kv_lora + rope) + 2 x kv_lora FLOPs per key per head) reading the weights and
    every cached latent (kv_lora + rope elements per token)."""
    s = MLA_MODULE_SHAPE
    latent = s["kv_lora_rank"] + s["qk_rope_head_dim"]
    if context:
        heads, seq, batch = c
        tokens, keys = batch * seq, batch * seq * seq / 2.0
        attention = 4.0 * keys * heads * (s["qk_nope_head_dim"] + s["qk_rope_head_dim"])
        kv = 0.0
    else:
        heads, batch, seq = c
        tokens = batch
        attention = 2.0 * batch * seq * heads * (latent + s["kv_lora_rank"])
        kv = batch * seq * latent * kv_bytes
    flops = 2.0 * tokens * _mla_weights(heads) + attention
    nbytes = MLA_GEMM_BYTES.get(gemm, 2.0) * _mla_weights(heads) + kv
    return max(flops / _tc_flops(gpu, "bf16"), nbytes / _mem_bw(gpu)) * 1e3


def mla_module_ms(gpu: str, heads: int, batch: float, seq: float, key: str, *, context: bool) -> float:
    """Latency in ms of one layer's whole MLA block on one rank holding `heads` of DeepSeek-V3's query heads (the
    engine's own attention module: down-projections, norms, q_b, kv_b or its absorbed BMMs, RoPE, KV write,
    attention, o_proj; no all-reduce), as aiconfigurator measured it inside the engine: context = `batch` prompts
    of `seq` tokens without prefix, else one decode step of `batch` sequences over `seq` cached tokens (the
    current one included). `key` from ``mla_module_key``. The grid's interpolation (module docstring): prefill
    blends sqrt(latency) along the prompt length; past the grid the utilisation of the nearest points over
    ``_mla_module_sol`` is held."""
    name = "mla_context_module" if context else "mla_generation_module"
    point = [float(heads), seq, batch] if context else [float(heads), batch, seq]
    return _resolve((gpu, name, key), point, 1 if context else None)


def mla_module_seconds(gpu: str, heads: int, batch: float, seq: float, key: str, *, context: bool) -> float:
    """Seconds of one layer's MLA block (``mla_module_ms``)."""
    return mla_module_ms(gpu, heads, batch, seq, key, context=context) / 1e3


# --- MLA decode in parts (SGLang's tables: no module) ------------------------------------------------------


def _generation_mla_sol(gpu: str, kv_bytes: float, c: list[float]) -> float:
    """The bare MLA decode kernel's roofline (ms), c = [heads, batch, kv length]: scores over the latent and RoPE key
    and values over the latent (2 x (kv_lora + rope) + 2 x kv_lora FLOPs per key per head), every cached latent
    (kv_lora + rope elements per token) read once."""
    s = MLA_MODULE_SHAPE
    heads, batch, seq = c
    latent = s["kv_lora_rank"] + s["qk_rope_head_dim"]
    flops = 2.0 * batch * seq * heads * (latent + s["kv_lora_rank"])
    nbytes = batch * seq * latent * kv_bytes
    return max(flops / _tc_flops(gpu, "bf16"), nbytes / _mem_bw(gpu)) * 1e3


def generation_mla_ms(gpu: str, heads: int, batch: float, context: float, kv_dtype: str = "bf16") -> float:
    """Latency in ms of one layer's bare MLA decode kernel (the absorbed form over DeepSeek-V3's 512 + 64 latent: no
    projections) for `batch` sequences over `context` cached tokens with `heads` query heads on the rank, as
    aiconfigurator measured it inside SGLang (the grid's interpolation, raw latency on every axis)."""
    if kv_dtype not in DTYPE_BYTES:
        raise KernelTableError(f"kv dtype {kv_dtype!r}: tables hold {sorted(DTYPE_BYTES)}")
    return _resolve((gpu, "generation_mla", kv_dtype), [float(heads), batch, context], None)


def mla_bmm_ms(gpu: str, tokens: float, heads: int, dtype: str, op: str) -> float:
    """Latency in ms of one layer's absorbed MLA projection in decode, op "pre" (each head's no-RoPE query into the
    512-wide latent, W_UK) or "post" (the latent output back to the head's 128 values, W_UV), over `tokens` tokens
    with `heads` heads on the rank, dtype "bf16" or "fp8"; read along its token curve (``token_curve``)."""
    curves = _part(gpu, "mla_bmm", "curves")
    key = f"{op}/{dtype}/{heads}"
    if key not in curves:
        raise KernelTableError(f"{_system(gpu)} has no measured MLA BMM {key!r}")
    counts, lats = curves[key]
    return token_curve(counts, lats, tokens)
