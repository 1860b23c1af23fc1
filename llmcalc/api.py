"""llmcalc as a library: one function per command (``params``, ``flops``, ``memory``, ``train``, ``layout``,
``serve``), each taking what the command takes and returning the record its ``--format json`` prints.

Options are keyword arguments named like the command's options (``--n-gpus 64`` is ``n_gpus=64``, ``--global-batch
512`` is ``global_batch=512``, ``--no-causal`` is ``causal=False``); values as the command reads them (``"1T"``,
``"8k"``, ``0.4``) or plain numbers. A model is a preset name, a path to a config.json (or its folder), or the
config itself as a dict; a GPU a preset name (``llmcalc presets``). The command's own parsing, defaults and checks
run on them (click's), and then its core call and its view: the record returned is that view's ``Document.data``.
Bad input raises ``LlmcalcError`` with the command's one line; an option the command does not take, ``TypeError``.
The command's warnings are issued as ``LlmcalcWarning`` (Python's ``warnings``).

Light at import: click and the command's modules are imported by the first call.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import LlmcalcError

if TYPE_CHECKING:
    import click

Model = str | os.PathLike[str] | Mapping[str, Any]


class LlmcalcWarning(UserWarning):
    """A warning a command prints on stderr beside its answer (e.g. a sequence past the model's positions)."""


def params(model: Model, **options: Any) -> dict[str, Any]:
    """`llmcalc params MODEL`: the exact parameter count by component, with the classic approximations.

    >>> count = llmcalc.params("llama-3-8b")
    >>> count["total"]  # the checkpoint's tensors: 8.03 B (Meta's model card)
    8030261248
    >>> count["total"] - count["non_embedding"] == 2 * 128_256 * 4096  # the token table and the untied head
    True
    """
    return run("params", model, options)


def flops(model: Model, **options: Any) -> dict[str, Any]:
    """`llmcalc flops MODEL`: forward and backward FLOPs of one step, per operation, with the rules of thumb.

    >>> step = llmcalc.flops("llama-3-8b", seq_len=2048)
    >>> D, L, S, V, N = 4096, 32, 2048, 128_256, 8_030_261_248  # matmuls: 2 x (N - token table - 65 norms of D)
    >>> step["forward_flops_per_token"] == 2 * (N - V * D - 65 * D) + 4 * L * S * D  # + QK^T and AV over S^2
    True
    """
    return run("flops", model, options)


def memory(model: Model, **options: Any) -> dict[str, Any]:
    """`llmcalc memory MODEL`: training memory per GPU by component, and whether it fits a GPU.

    >>> mem = llmcalc.memory("llama-3-8b", seq_len="8k", gpu="h100-sxm", n_gpus=8, zero=3)
    >>> mem["bytes_per_param"]["total"], mem["fits"]  # mixed-precision Adam: 2 + 2 + 4 + 8 (ZeRO paper, 3.1)
    (16.0, True)
    """
    return run("memory", model, options)


def train(model: Model | None = None, **options: Any) -> dict[str, Any]:
    """`llmcalc train MODEL`: FLOPs, GPU-hours, wall-clock, cost and energy of a run (model None: ``params=``).

    >>> plan = llmcalc.train(params="7B", tokens="1T", gpu="h100-sxm", n_gpus=64, mfu=0.4)
    >>> plan["total_flops"] == 6 * 7e9 * 1e12, plan["compute_gpu_hours"] / plan["gpu_hours"]  # 6 N T; goodput
    (True, 0.9)
    """
    return run("train", model, options)


def layout(model: Model, **options: Any) -> dict[str, Any]:
    """`llmcalc layout MODEL`: the parallel layouts that fit on N GPUs, ranked by predicted throughput.

    >>> ranked = llmcalc.layout("llama-3-8b", gpu="h100-sxm", n_gpus=8, seq_len="8k", global_batch=64, top=3)
    >>> [r["tp"] * r["cp"] * r["pp"] * r["dp"] for r in ranked["layouts"]]  # each lays out the 8 GPUs
    [8, 8, 8]
    """
    return run("layout", model, options)


def serve(model: Model, **options: Any) -> dict[str, Any]:
    """`llmcalc serve MODEL`: serving memory as vLLM sizes it (weights, KV cache, concurrency), or a workload.

    >>> answer = llmcalc.serve("llama-3-8b", gpu="h100-sxm", max_model_len="8k")
    >>> answer["fits"], answer["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads
    (True, True)
    """
    return run("serve", model, options)


def run(command: str, model: Model | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """The record `llmcalc COMMAND MODEL --option value ... --format json` prints, with `options` as keywords."""
    import click

    from .cli.common import captured
    from .cli.main import cli

    cmd = cli.get_command(None, command)  # type: ignore[arg-type]  # the group reads no context here
    if cmd is None:
        raise LlmcalcError(f"no command {command!r}")
    args = arguments(cmd, options)
    with _model_path(model) as name, captured() as answers:
        try:
            argv = [*args, "--", name] if name else args
            with click.Context(cli, info_name="llmcalc", **cli.context_settings) as parent, \
                    cmd.make_context(command, argv, parent=parent) as ctx:  # under the group's settings (-h)
                cmd.invoke(ctx)
        except LlmcalcError as exc:
            raise LlmcalcError(_named(str(exc), name, model)) from None
        except click.ClickException as exc:
            raise LlmcalcError(_named(exc.format_message(), name, model)) from None
    if not answers:
        raise LlmcalcError(f"{command} gave no answer")
    doc, notes = answers[-1]
    for note in notes:
        warnings.warn(note, LlmcalcWarning, stacklevel=3)
    return doc.data


def arguments(cmd: click.Command, options: Mapping[str, Any]) -> list[str]:
    """The command line of `options`: each keyword the option it names (its long name, dashes as underscores, or
    its parameter name), a flag given by True (False: its --no- form, else left out), a list given per item."""
    import click

    by_name: dict[str, tuple[click.Option, bool]] = {}  # keyword -> (its option, whether it is the --no- form)
    for option in cmd.params:
        if isinstance(option, click.Option) and not option.hidden and option.name != "fmt":
            for flag in (option.name, *option.opts, *option.secondary_opts):
                by_name.setdefault(str(flag).lstrip("-").replace("-", "_"), (option, flag in option.secondary_opts))
    args: list[str] = []
    for key, value in options.items():
        if key not in by_name:
            raise TypeError(f"{cmd.name}() got an unexpected keyword argument {key!r}; it takes "
                            f"{', '.join(sorted(k for k, (_, negative) in by_name.items() if not negative))}")
        option, negative = by_name[key]
        if value is None:
            continue
        if option.is_flag and isinstance(value, bool):
            value = value != negative
            off = option.secondary_opts[0] if option.secondary_opts else None
            args += [option.opts[0]] if value else ([off] if off else [])
            continue
        items = value if option.multiple and isinstance(value, (list, tuple)) else [value]
        for item in items:
            args += [option.opts[0], *(map(_text, item) if isinstance(item, tuple) else [_text(item)])]
    return args


def _text(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


@contextmanager
def _model_path(model: Model | None) -> Iterator[str]:
    """The command line's MODEL: a name or path as given, a dict written to a config.json named after its "name"
    (else "custom") in a temporary folder for the call."""
    if model is None or isinstance(model, (str, os.PathLike)):
        yield "" if model is None else os.fspath(model)
        return
    if not isinstance(model, Mapping):
        raise TypeError(f"model must be a preset name, a path to a config.json or a dict, not {type(model).__name__}")
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in str(model.get("name") or "custom")).strip(".")
    with tempfile.TemporaryDirectory(prefix="llmcalc-") as folder:
        path = Path(folder) / (name or "custom") / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(dict(model)))
        yield str(path)


def _named(message: str, path: str, model: Model | None) -> str:
    """A refusal's line, a dict model named as one (not by the temporary file it was written to)."""
    return message.replace(path, "the model dict") if path and isinstance(model, Mapping) else message
